# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Offline stand-in for the get-pip.py bootstrap script that ansible-test downloads.

ansible-test bootstraps pip into each of its sanity virtualenvs by running
~/.ansible/test/cache/get_pip_<X_Y>.py as __main__, with pip install options and
packages (``pip==X.Y``) as arguments. It fetches that script from
ci-files.testing.ansible.com, which these machines cannot reach, unless the cache
file already exists. scripts/sanity installs this file under that name next to the
pip wheel of the same version; it installs pip from that wheel with pip itself.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import sys

# get-pip.py options that are not pip install options: the empty virtualenvs
# ansible-test creates have no setuptools or wheel, and must get none.
GET_PIP_ONLY_OPTIONS = ("--no-setuptools", "--no-wheel")


def pip_wheel(cache_dir, version):
    """Return the path of the cached pip wheel of the given version."""
    wheels = sorted(glob.glob(os.path.join(cache_dir, "pip-%s-*.whl" % version)))
    if not wheels:
        sys.exit("no pip %s wheel in %s: run scripts/sanity, which downloads it" % (version, cache_dir))
    return wheels[0]


def main():
    cache_dir, script_name = os.path.split(os.path.abspath(__file__))
    # The script is installed as get_pip_24_2.py for pip 24.2.
    version = os.path.splitext(script_name)[0][len("get_pip_"):].replace("_", ".")
    sys.path.insert(0, pip_wheel(cache_dir, version))

    from pip._internal.cli.main import main as pip_main

    options = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY_OPTIONS]
    sys.exit(pip_main(["install", "--no-index", "--find-links", cache_dir] + options))


if __name__ == "__main__":
    main()
