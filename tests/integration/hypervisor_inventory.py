"""An inventory of the lab's running hypervisors with the egress_proxy role's settings for non-booting proxies."""

from tests.lab import config, hypervisors
from tests.lab.fleet_runs import tiny_proxy_vars

TINY_IMAGE_NAME = "tiny-fleet"


def running_specs():
    """The lab hypervisors that are up."""
    return [spec for spec in hypervisors.present_specs() if hypervisors.holder(spec)]


def hypervisor_inventory(image_name=TINY_IMAGE_NAME):
    """The lab's first two hypervisors as an inventory: connection and role-wide settings (key from ssh-agent).

    image_name is the name the base image is cached under, so a test can remove its own.
    """
    hosts = {spec.name: {"ansible_host": spec.address} for spec in running_specs()[:2]}
    # No key file: the machine credential's key is in ssh-agent.
    ssh_args = "-o UserKnownHostsFile=%s -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes" % (
        config.SSH_KNOWN_HOSTS)
    group_vars = dict(tiny_proxy_vars(image_name), ansible_user="root", ansible_ssh_common_args=ssh_args,
                      ansible_python_interpreter="/usr/bin/python3", ansible_pipelining=True)
    return {"all": {"children": {"hypervisors": {"hosts": hosts, "vars": group_vars}}}}
