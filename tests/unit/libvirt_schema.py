# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""libvirt's own schemas for the XML the builders write, through virt-xml-validate (libvirt-clients)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import subprocess


def virt_xml_validate(tmp_path, xml, schema):
    """virt-xml-validate's completed process for ``xml`` against libvirt's schema ``schema`` (domain, storagevol...)."""
    path = tmp_path / ("%s.xml" % schema)
    path.write_text(xml)
    return subprocess.run(["virt-xml-validate", str(path), schema], capture_output=True, text=True, check=False)
