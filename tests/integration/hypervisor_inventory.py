"""An inventory of the lab's running hypervisors with the egress_proxy role's settings for non-booting proxies."""

from tests.lab import config, hypervisors

TINY_IMAGE_NAME = "tiny-fleet"


def running_specs():
    """The lab hypervisors that are up."""
    return [spec for spec in hypervisors.present_specs() if hypervisors.holder(spec)]


def hypervisor_inventory(image_name=TINY_IMAGE_NAME):
    """The lab's first two hypervisors as an inventory: connection and role-wide settings (key from ssh-agent).

    image_name is the name the base image is cached under, so a test can remove its own.
    """
    mirror = "http://127.0.0.1:8642/"  # each hypervisor's own image mirror
    hosts = {spec.name: {"ansible_host": spec.address} for spec in running_specs()[:2]}
    return {"all": {"children": {"hypervisors": {"hosts": hosts, "vars": {
        "ansible_user": "root",
        # No key file: the machine credential's key is in ssh-agent.
        "ansible_ssh_common_args": "-o UserKnownHostsFile=%s -o GlobalKnownHostsFile=/dev/null "
                                   "-o StrictHostKeyChecking=yes" % config.SSH_KNOWN_HOSTS,
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_pipelining": True,
        "egress_proxy_uri": config.LIBVIRT_URI,
        "egress_proxy_pool": config.HV_POOL_NAME,
        "egress_proxy_bridge": config.HV_BRIDGE,
        "egress_proxy_image": {"name": image_name, "url": mirror + config.TINY_QCOW2,
                               "checksum": "sha256:" + mirror + config.SHA256SUMS},
        "egress_proxy_virt_type": config.VIRT_TYPE,
        "egress_proxy_cpu_mode": config.CPU_MODE,
        "egress_proxy_disk_size_gb": 1,
        "egress_proxy_install_packages": False,
        "egress_proxy_vendor_data": "",
        "egress_proxy_allowed_clients": ["198.18.0.0/15"],
        # The small image never boots: no address to wait for, no guest to act on an ACPI shutdown.
        "egress_proxy_wait_for_ip": False,
        "egress_proxy_shutdown_timeout": config.TINY_SHUTDOWN_TIMEOUT,
    }}}}}
