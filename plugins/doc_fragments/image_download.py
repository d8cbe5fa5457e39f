# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # The options of every module that caches a base image (kvm_base_image, kvm_proxy).
    DOCUMENTATION = r"""
requirements:
  - requests (Debian/Ubuntu/RHEL package C(python3-requests)) on the host that runs the module, to download the image.
options:
  validate_certs:
    description:
      - Verify the TLS certificate of HTTPS servers (the image's and the checksum file's).
    type: bool
    default: true
  ca_path:
    description:
      - A CA certificate bundle (a PEM file, or a directory of hashed certificates) on the host that runs the module,
        trusted instead of the system's CA certificates to verify HTTPS servers; for a mirror whose certificate is
        signed by a private CA.
      - Ignored when O(validate_certs=false).
    type: path
  timeout:
    description:
      - Seconds to wait for an HTTP server to connect or to send the next bytes (not for the whole download).
    type: int
    default: 60
  retries:
    description:
      - How many times a download is retried after an HTTP 5xx answer, a network error or a body cut short,
        waiting 2, 4, 8... seconds (at most 60) in between. HTTP 4xx answers are not retried.
    type: int
    default: 3
  lock_timeout:
    description:
      - Seconds to wait for another run on this machine that is caching the same image into the same pool.
    type: int
    default: 3600
"""
