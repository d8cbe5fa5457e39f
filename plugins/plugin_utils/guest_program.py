# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A program of the guest written from a module of this collection: the module's own text, run as a script.

Such a module (decision_counter) imports the standard library alone, since the guest's python3 has no Ansible, and
has a ``main(argv, ...)``; the unit tests import it as a module and run the text the guest gets.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os


def program_text(module, *arguments):
    """The text of ``module`` as a script of the guest's python3 that runs its ``main(sys.argv, *arguments)``
    (``arguments`` numbers or text, written as Python literals)."""
    with open(os.path.splitext(os.path.abspath(module.__file__))[0] + ".py", encoding="utf-8") as handle:
        source = handle.read()
    return "#!/usr/bin/python3\n%s\n\nif __name__ == \"__main__\":\n    main(sys.argv%s)\n" % (
        source, "".join(", %r" % (argument,) for argument in arguments))
