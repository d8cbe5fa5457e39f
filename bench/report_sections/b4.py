"""B4: provision to address (`bench/b4_address.py`)."""

from bench.report_sections._common import met, seconds_text, section


@section("B4", "## B4: provision to address")
def render(results, b4, plots):
    module, floor, peer = b4["module"], b4["floor"], b4["peer"]
    overhead = module["playbook"] - floor["start_to_address"] if floor["start_to_address"] else None
    if peer["address_at"] is not None:
        ahead = met(module["playbook"] < peer["address_at"])
    elif module["playbook"] <= peer["cap"]:
        ahead = met(True)
    else:
        ahead = "undecided: the cap came before kvm_proxy's own address"
    boots = [boot for boot in (floor["start_to_address"],
                               module["address_at"] - (module["running_at"] or 0) if module["address_at"] else None,
                               peer["address_at"] - (peer["running_at"] or 0) if peer["address_at"] else None) if boot]
    boot_range = "%.0f-%.0f s" % (min(boots), max(boots)) if boots else "no boot reached an address"
    lines = ["The lab's real guest (TCG, 1 vCPU, 512 MiB) on the single lab's qemu:///system (`bench/b4_address.py`), "
             "one run of each path (a first boot to the agent's address took %s in this run, under TCG on this 2-vCPU "
             "machine, with the load). This collection: a "
             "playbook of one kvm_proxy task with `wait_for_ip`, the base image cached beforehand, timed from "
             "ansible-playbook's start to its end. The floor: the same domain with its overlay emptied again (a first "
             "boot once more), `virsh start` and `virsh domifaddr --source agent` every second. The peer: "
             "community.libvirt %s's `virt_install` (`ansible` %s has no `virt_cloud_instance`, the module the issue "
             "named; `virt_install` with `cloud_init` is its way to a cloud-init guest, with virt-install's own seed: the "
             "module passes a `user_data` dictionary on as `user-data.<key>=`, which virt-install refuses) on the "
             "same image as backing store, capped at %d s. A thread polling virsh every second notes when each domain first runs and when its "
             "agent first reports an address." % (boot_range, b4["peer_version"], results["peer"].split("==")[1], peer["cap"]), "",
             "| path | domain running (s) | agent address (s) | done (s) | over the floor (s) | target |",
             "|---|---:|---:|---:|---:|---|",
             "| kvm_proxy, `wait_for_ip` (Ansible included) | %s | %s | %.1f | %s | <= 5: %s |" % (
                 seconds_text(module["running_at"]), seconds_text(module["address_at"]), module["playbook"],
                 seconds_text(overhead), met(overhead is not None and overhead <= 5)),
             "| floor: `virsh start` + `domifaddr --source agent` | - | %s | %s | - | |" % (
                 seconds_text(floor["start_to_address"]), seconds_text(floor["start_to_address"])),
             "| community.libvirt `virt_install` | %s | %s | %.1f (%s) | %s | kvm_proxy ahead: %s |" % (
                 seconds_text(peer["running_at"]), seconds_text(peer["address_at"], "none within the cap"),
                 peer["task_seconds"], peer["ended"],
                 seconds_text(peer["address_at"] - floor["start_to_address"]
                              if peer["address_at"] and floor["start_to_address"] else None, "-"), ahead)]
    if module["address_at"] is not None:
        lines += ["", "kvm_proxy's run: the domain ran %.1f s after ansible-playbook started (Ansible's start-up, the "
                  "image check, the seed, the define), the agent reported its address %.1f s after that, and the "
                  "playbook ended %.1f s after the address." % (
                      module["running_at"] or 0, module["address_at"] - (module["running_at"] or 0),
                      module["playbook"] - module["address_at"])]
    if overhead is not None and overhead > 5:
        boot = module["address_at"] - (module["running_at"] or 0) if module["address_at"] else None
        after = module["playbook"] - (module["address_at"] or module["playbook"])
        own = (module["running_at"] or 0) + after
        lines += ["", "**Where the target is missed** (%.1f s over the floor). kvm_proxy's own share is %.1f s: %.1f s "
                  "before the domain runs (Ansible's start-up, the image check, the seed, the define) and %.1f s "
                  "between the agent's address and the playbook's end (the module asks every %g s, "
                  "`_addresses.POLL_INTERVAL`, as the floor does). The other %.1f s is the boot itself: "
                  "%s s here against the floor's %.1f s, one TCG boot each on %d vCPUs shared with other work, which "
                  "varies by more than the target from one boot to the next. What would close it: runs on a quiet "
                  "machine, several of each path, to tell the boot's noise from the module's cost; then fewer tasks "
                  "before the define." % (
                      overhead, own, module["running_at"] or 0, after, b4["poll_interval"], overhead - own,
                      seconds_text(boot), floor["start_to_address"], results["machine"]["cpus"])]
    if peer["address_at"] is not None and module["playbook"] >= peer["address_at"]:
        lines += ["", "**Where the target is missed** (kvm_proxy's address %.1f s after its start, the peer's %.1f s): "
                  "both are one first boot of the same image under TCG, and kvm_proxy ended %.1f s after the floor's "
                  "own boot, so the difference is the boots' spread, not the module: one boot here varies by more "
                  "than the gap from one run to the next. What would close it: several boots of each path on a quiet "
                  "machine (each a boot, %s here), compared by their medians." % (
                      module["playbook"], peer["address_at"], module["playbook"] - floor["start_to_address"], boot_range)]
    if "seed_cdrom_bus" in peer:
        lines += ["", "virt-install gave the peer's guest its seed on a %s cdrom (Debian's cloud kernel has no driver for "
                  "SATA, so cloud-init there finds no seed) and %s guest agent channel." % (
                      peer["seed_cdrom_bus"], "a" if peer["agent_channel"] else "no")]
    if peer["address_at"] is None and floor["start_to_address"] and floor["start_to_address"] > peer["cap"]:
        lines += ["", "In this run the floor's own boot took %.0f s, longer than the peer's %d s cap: the peer's "
                  "missing address says only that the cap came first." % (floor["start_to_address"], peer["cap"])]
    lines += ["", "What the peer did: %s; the last lines of its output:" % peer["ended"], "", "```",
              peer["output_tail"].strip()[-800:], "```"]
    return lines
