"""The examples of docs/role-egress_proxy.md, read from the page, and the one rule that adapts them to the lab.

tests/integration/test_role_examples.py runs them on the lab's hypervisors (its docstring tabulates the rule);
tests/unit/roles/test_egress_proxy_examples_parse.py checks, without the lab, that every block of the page is read and
adapted.
"""

import copy
import os
import re
import shlex

import yaml

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(REPO_ROOT, "docs", "role-egress_proxy.md")
LAB_INVENTORY = os.path.join(REPO_ROOT, "inventories", "lab")
NAME_PREFIX = "eptest-roledoc-"
# The example hypervisors and the lab's.
HOSTS = {"hv1.example.net": "lab-hv1", "hv2.example.net": "lab-hv2"}
# What the lab's group_vars give every example inventory: where the proxies live on the lab (pool, bridge, the
# mirror's image, TCG), and what its image and its network without a way out need (no packages, no vendor-data).
LAB_SETTINGS = ("egress_proxy_pool", "egress_proxy_bridge", "egress_proxy_image", "egress_proxy_virt_type",
                "egress_proxy_cpu_mode", "egress_proxy_install_packages", "egress_proxy_vendor_data")
# The sections whose blocks the lab test runs.
QUICK_START, FLEET, SERIAL, DESTROY, FACT = (
    "Quick start", "One list for the fleet", "Garbage collection and rolling replacement", "Entry points",
    "The fact `egress_proxy_proxies`")
# The page's other blocks, by section, with the reason no run takes them.
NOT_RUN = {
    "What runs inside a proxy": "squid.conf as the role renders it (tests/unit/roles/test_egress_proxy_docs.py checks it)",
    "Policy": "the policy's variables and their vaulted passwords (tests/unit/roles/test_egress_proxy_policy.py renders "
              "them and squid -k parse reads the result; test_networking.py proves a policy on a booted proxy)",
    "Profiles and report mode": "profiles, an access line and squid.conf's rules (tests/unit/roles/"
                                "test_egress_proxy_profiles.py renders them and squid -k parse reads the result; "
                                "test_squid_profiles.py runs them through a real squid)",
    "TLS server names": "profiles that check their CONNECTs' TLS names, and an access line (tests/unit/roles/"
                        "test_egress_proxy_profiles.py renders them and squid -k parse reads the result; "
                        "test_squid_profiles.py runs them through a real squid, test_networking.py on a booted proxy)",
    "Networking": "static addresses on a LAN and an uplink with a router (test_networking.py proves a two-NIC "
                  "proxy on the lab), and kvm_proxy_info's output",
    "Observability": "Prometheus' own configuration and access lines (test_networking.py runs a Prometheus with the role's "
                     "file_sd and the shipped rules, and a syslog server, against a booted proxy)",
    "Moving a proxy": "a fleet entry re-pointed and the old copy listed absent (test_fleet_move.py moves a proxy between "
                      "lab-hv1 and lab-hv2 and back)",
    "A shared client address (HA groups)": "two proxies behind one address on a client segment (tests/unit/roles/"
                                           "test_egress_proxy_ha_groups.py renders them, keepalived and squid read the "
                                           "result; test_ha_group.py runs a pair on the lab's shared segment)",
}
# A block of the page that is inventory files starts with a comment naming its first file.
FILE_HEADER = re.compile(r"^# (?P<path>\S+\.yml)$", re.M)
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```$", re.M | re.S)
HEADING = re.compile(r"^#{2,3} (?P<title>.+)$", re.M)


class Block:
    """One fenced block of the page: its section's heading, language and text."""

    def __init__(self, section, lang, body):
        self.section, self.lang, self.body = section, lang, body

    def files(self):
        """{path: content} of an inventory block (``# inventory/...`` headers), or None for any other block."""
        headers = list(FILE_HEADER.finditer(self.body))
        if not headers or headers[0].start() != 0:
            return None
        ends = [header.start() for header in headers[1:]] + [len(self.body)]
        return {header["path"]: yaml.safe_load(self.body[header.end():end]) for header, end in zip(headers, ends)}

    def plays(self):
        """The plays of a playbook block, or None for any other block."""
        if self.lang != "yaml" or self.files() is not None:
            return None
        loaded = yaml.safe_load(self.body)
        if isinstance(loaded, list) and all(isinstance(play, dict) and "hosts" in play for play in loaded):
            return loaded
        return None

    def commands(self):
        """The argv of each ansible-playbook command of a shell block (comments dropped)."""
        if self.lang != "sh":
            return []
        return [shlex.split(line, comments=True) for line in self.body.splitlines()
                if line.startswith("ansible-playbook ")]

    def __repr__(self):
        return "Block(%r, %r, %r)" % (self.section, self.lang, self.body[:60])


def blocks(text=None):
    """Every fenced block of the page, in order, with the heading of the section it is in."""
    if text is None:
        with open(DOC) as handle:
            text = handle.read()
    headings = [(match.start(), match["title"]) for match in HEADING.finditer(text)]
    found = []
    for fence in FENCE.finditer(text):
        section = [title for start, title in headings if start < fence.start()][-1]
        found.append(Block(section, fence["lang"], fence["body"]))
    return found


def section_blocks(section, text=None):
    return [block for block in blocks(text) if block.section == section]


def inventory_files(section, text=None):
    """{path: content} of the inventory files a section shows, merged over its blocks."""
    files = {}
    for block in section_blocks(section, text):
        files.update(block.files() or {})
    return files


def section_plays(section, text=None):
    (plays,) = [block.plays() for block in section_blocks(section, text) if block.plays() is not None]
    return plays


def fleet_files(quick_start, fleet):
    """The fleet example as a whole inventory: the Quick start's hosts and group_vars with the fleet list added,
    instead of the per-host lists (the page's "instead of (or next to)"; next to them, one name would be listed twice)."""
    group = "inventory/group_vars/hypervisors.yml"
    files = {path: content for path, content in quick_start.items() if "/host_vars/" not in path}
    files[group] = dict(quick_start[group], **fleet[group])
    return files


def fleet_hosts(files):
    """The example hosts the fleet list of an inventory names."""
    return [entry["hypervisor"] for entry in files["inventory/group_vars/hypervisors.yml"].get("egress_proxy_fleet", [])]


def named(name):
    return NAME_PREFIX + name


def _read_yaml(*path):
    with open(os.path.join(*path)) as handle:
        return yaml.safe_load(handle)


class LabRule:
    """The one rule that adapts the page's inventories to the lab (test_role_examples.py tabulates it)."""

    def __init__(self):
        lab_hosts = _read_yaml(LAB_INVENTORY, "hosts.yml")["hypervisors"]
        self.host_vars = lab_hosts["hosts"]
        self.connection = lab_hosts["vars"]
        lab_group_vars = _read_yaml(LAB_INVENTORY, "group_vars", "hypervisors.yml")
        self.settings = {key: lab_group_vars[key] for key in LAB_SETTINGS}

    @staticmethod
    def host(name):
        return HOSTS[name]

    def hosts_file(self, hosts):
        """hosts.yml's group with each example host as the lab's, connected as inventories/lab connects."""
        return {"hypervisors": {"hosts": {self.host(name): dict(self.host_vars[self.host(name)]) for name in hosts},
                                "vars": dict(self.connection)}}

    def variables(self, variables, group=False):
        """A group_vars or host_vars file: proxy names prefixed, fleet hosts the lab's, the lab's settings in group_vars."""
        adapted = copy.deepcopy(variables)
        for instance in adapted.get("egress_proxy_instances", []):
            instance["name"] = named(instance["name"])
        for entry in adapted.get("egress_proxy_fleet", []):
            entry["name"] = named(entry["name"])
            entry["hypervisor"] = self.host(entry["hypervisor"])
        if group:
            adapted.update(copy.deepcopy(self.settings))
        return adapted

    def inventory(self, files, extra_hosts=()):
        """{relative path: content} of the adapted inventory directory ``inventory/``.

        ``files`` are the page's, by their header paths; ``extra_hosts`` (example host names) join hosts.yml, for an
        example that names hypervisors its section's hosts.yml does not list.
        """
        hosts = list(files["inventory/hosts.yml"]["hypervisors"]["hosts"])
        hosts += [name for name in extra_hosts if name not in hosts]
        adapted = {"hosts.yml": self.hosts_file(hosts)}
        for path, content in files.items():
            kind, _slash, file_name = path[len("inventory/"):].partition("/")
            if kind == "group_vars":
                adapted["group_vars/" + file_name] = self.variables(content, group=True)
            elif kind == "host_vars":
                adapted["host_vars/%s.yml" % self.host(file_name[:-len(".yml")])] = self.variables(content)
        return adapted


def write_inventory(directory, adapted):
    """The adapted inventory as files under ``directory``/inventory; its path."""
    root = os.path.join(str(directory), "inventory")
    for relative, content in adapted.items():
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(yaml.safe_dump(content, sort_keys=False))
    return root
