"""B7: provision to verified egress (`bench/b7_egress.py`)."""

from bench.report_sections._common import met, seconds_text, section


@section("B7", "## B7: provision to verified egress")
def render(results, b7, plots):
    deploy, bare = b7["deploy"], b7["bare_boot_to_address"]
    first = deploy["first_request_at"]
    overhead = first - bare if first is not None and bare is not None else None
    lines = ["The demo's real guest on %s over SSH (`bench/b7_egress.py`): playbooks/deploy.yml with inventories/lab, "
             "one proxy, timed from ansible-playbook's start to the first request proxied by the guest's squid from "
             "the hypervisor's LAN to the LAN's origin server (curl every second after the playbook). In the same run, "
             "the bare boot: the same domain, its overlay emptied again, `virsh start` to the agent's address polled "
             "with virsh every second. One run (each path one first boot under TCG, with the load)." % b7["host"], "",
             "| | seconds |", "|---|---:|",
             "| domain running, after the playbook's start | %s |" % seconds_text(deploy["running_at"]),
             "| agent address | %s |" % seconds_text(deploy["address_at"]),
             "| playbook done | %s |" % seconds_text(deploy["playbook"]),
             "| first proxied request | %s |" % seconds_text(first),
             "| bare boot: `virsh start` to the agent's address | %s |" % seconds_text(bare),
             "| overhead: first request - bare boot (target <= 5) | %s: %s |" % (
                 seconds_text(overhead, "-"), met(overhead is not None and overhead <= 5))]
    if overhead is not None and overhead > 5:
        lines += ["", "**Where the target is missed** (%.1f s): %.1f s pass before the domain runs (Ansible over SSH, "
                  "the role's validation, the image check, the seed, the define), the boot to the agent's address "
                  "took %.1f s against the bare boot's %.1f s, the playbook ended %.1f s after the address and squid "
                  "answered %.1f s after that (the module asks libvirt for the address every %g s). What would close "
                  "it: the role's checks and rendering on the controller inside the converge's own task (an action "
                  "plugin around kvm_proxy_set, as for B2w), the boots' own spread aside; and part "
                  "of the gap is squid starting after the agent, which `egress_proxy_wait_for_port: true` (off by "
                  "default and in this run) makes the playbook wait for, so no polling follows it." % (
                      overhead, deploy["running_at"] or 0, (deploy["address_at"] or 0) - (deploy["running_at"] or 0),
                      bare, (deploy["playbook"] or 0) - (deploy["address_at"] or 0),
                      first - (deploy["playbook"] or 0), b7["poll_interval"])]
    return lines
