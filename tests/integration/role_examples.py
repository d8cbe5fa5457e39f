"""The examples of docs/role-egress_proxy.md, read from the page, and the one rule that adapts them to the lab.

tests/integration/test_role_examples.py runs them on the lab's hypervisors (its docstring tabulates the rule);
tests/unit/roles/test_egress_proxy_examples_parse.py checks, without the lab, that every block of the page is read and
adapted.
"""

import copy
import os
import re
import secrets
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
QUICK_START, FLEET, SERIAL, DESTROY, FACT, PROFILES, ROLLOUT = (
    "Quick start", "One list for the fleet", "Garbage collection and rolling replacement", "Entry points",
    "The fact `egress_proxy_proxies`", "Profiles and report mode", "Rolling an allowlist out")
# The page's other blocks, by section, with the reason no run takes them.
NOT_RUN = {
    "What runs inside a proxy": "squid.conf as the role renders it (tests/unit/roles/test_egress_proxy_docs.py checks it)",
    "Policy": "the policy's variables and their vaulted passwords (tests/unit/roles/test_egress_proxy_policy.py renders "
              "them and squid -k parse reads the result; test_networking.py proves a policy on a booted proxy)",
    PROFILES: "its inventory block is the one Rolling an allowlist out runs; the rest: access lines, squid.conf's "
              "rules (tests/unit/roles/test_egress_proxy_profiles.py renders them and squid -k parse reads the result; "
              "test_squid_profiles.py runs them through a real squid) and profiles with egress addresses of their own, "
              "which take a static segment the Quick start's proxies lack (test_networking.py proves them on a "
              "two-NIC proxy)",
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
# The blocks of a section that runs that no run takes, by their first line, with the reason.
NOT_RUN_BLOCKS = {
    (ROLLOUT, 'sum by (instance, profile, rule) (increase(egress_proxy_decisions_total{decision="would_deny"}[1d]))'):
        "a Prometheus query (test_networking.py runs a Prometheus on the role's file_sd with the shipped rules)",
    (ROLLOUT, "grep -h ' decision=would_deny profile=backup ' /var/log/egress-proxies/*.log | grep -o ' dest=[^ ]*' "
              "| sort | uniq -c"):
        "the syslog server's files (the run greps the proxy's own access.log for the same fields; test_networking.py "
        "reads a syslog server's)",
}
# A vaulted variable a page's variable names ("{{ vault_... }}").
VAULTED = re.compile(r"\{\{ *(vault_\w+) *\}\}")
# A block of the page that is inventory files starts with a comment naming its first file.
FILE_HEADER = re.compile(r"^# (?P<path>\S+\.yml)$", re.M)
# A fenced block, indented too (in a list item).
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```$", re.M | re.S)
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
        indent = fence["indent"]
        body = "".join(line[len(indent):] if line.startswith(indent) else line
                       for line in fence["body"].splitlines(keepends=True))
        found.append(Block(section, fence["lang"], body))
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


def with_group_vars(files, added):
    """An inventory's files with another example's group variables added to its group_vars."""
    group = "inventory/group_vars/hypervisors.yml"
    return dict(files, **{group: dict(files[group], **added[group])})


def fleet_files(quick_start, fleet):
    """The fleet example as a whole inventory: the Quick start's hosts and group_vars with the fleet list added,
    instead of the per-host lists (the page's "instead of (or next to)"; next to them, one name would be listed twice)."""
    return with_group_vars({path: content for path, content in quick_start.items() if "/host_vars/" not in path}, fleet)


def profile_files(quick_start, profiles):
    """The roll-out's inventory: the Quick start's with the profiles example's group variables added."""
    return with_group_vars(quick_start, profiles)


def fleet_hosts(files):
    """The example hosts the fleet list of an inventory names."""
    return [entry["hypervisor"] for entry in files["inventory/group_vars/hypervisors.yml"].get("egress_proxy_fleet", [])]


def named(name):
    return NAME_PREFIX + name


def _read_yaml(*path):
    with open(os.path.join(*path)) as handle:
        return yaml.safe_load(handle)


def lab_values(spec):
    """The page's networks and destination that the lab has under other values, and the lab's, on the hypervisor
    ``spec`` (lab-hv1, where the examples' proxies run): its LAN, whose namespace is the clients', the monitoring host
    and the origin a proxy with one NIC reaches, by address (every lab address is internal to deny_internal)."""
    return {"10.20.0.0/16": spec.lan_cidr, "10.20.0.2/32": spec.lan_address + "/32",
            "10.20.7.0/24": "%s.0/28" % spec.lan_prefix, "backup.example-bucket.net": spec.lan_address}


def _replaced(value, values):
    """``value`` (a variable's, nested) with each string that is a key of ``values`` replaced by its value."""
    if isinstance(value, dict):
        return {key: _replaced(item, values) for key, item in value.items()}
    if isinstance(value, list):
        return [_replaced(item, values) for item in value]
    return values.get(value, value) if isinstance(value, str) else value


class LabRule:
    """The one rule that adapts the page's inventories to the lab (test_role_examples.py tabulates it), for the lab
    hypervisor ``spec`` (a tests.lab.config.HypervisorSpec: lab-hv1's)."""

    def __init__(self, spec):
        lab_hosts = _read_yaml(LAB_INVENTORY, "hosts.yml")["hypervisors"]
        self.host_vars = lab_hosts["hosts"]
        self.connection = lab_hosts["vars"]
        lab_group_vars = _read_yaml(LAB_INVENTORY, "group_vars", "hypervisors.yml")
        self.settings = {key: lab_group_vars[key] for key in LAB_SETTINGS}
        self.values = lab_values(spec)
        # The bridge has no address on a lab hypervisor: what the page asks from the hypervisor (status.yml's reads of
        # the metrics pages) runs in its LAN namespace.
        self.client = {"egress_proxy_verify_netns": spec.lan_netns}
        # The vaulted passwords the page's variables name, each a password of this run's.
        self.secrets = {}

    @staticmethod
    def host(name):
        return HOSTS[name]

    def hosts_file(self, hosts):
        """hosts.yml's group with each example host as the lab's, connected as inventories/lab connects."""
        return {"hypervisors": {"hosts": {self.host(name): dict(self.host_vars[self.host(name)]) for name in hosts},
                                "vars": dict(self.connection)}}

    def variables(self, variables, group=False):
        """A group_vars or host_vars file: proxy names prefixed, fleet hosts the lab's, the page's networks and
        destination the lab's, the lab's settings and client in group_vars."""
        adapted = _replaced(variables, self.values)
        for instance in adapted.get("egress_proxy_instances", []):
            instance["name"] = named(instance["name"])
        for entry in adapted.get("egress_proxy_fleet", []):
            entry["name"] = named(entry["name"])
            entry["hypervisor"] = self.host(entry["hypervisor"])
        if group:
            adapted.update(copy.deepcopy(self.settings), **self.client)
        return adapted

    def inventory(self, files, extra_hosts=()):
        """{relative path: content} of the adapted inventory directory ``inventory/``.

        ``files`` are the page's, by their header paths; ``extra_hosts`` (example host names) join hosts.yml, for an
        example that names hypervisors its section's hosts.yml does not list.
        """
        hosts = list(files["inventory/hosts.yml"]["hypervisors"]["hosts"])
        hosts += [name for name in extra_hosts if name not in hosts]
        adapted = {"hosts.yml": self.hosts_file(hosts)}
        vaulted = sorted(set(VAULTED.findall(yaml.safe_dump(files))))
        if vaulted:
            self.secrets.update({name: secrets.token_urlsafe(12) for name in vaulted if name not in self.secrets})
            adapted["group_vars/all.yml"] = {name: self.secrets[name] for name in vaulted}
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
