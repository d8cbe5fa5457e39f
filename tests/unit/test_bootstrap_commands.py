"""scripts/system-requirements.txt names every program the tests, the lab, the benchmarks and the scripts run.

scripts/bootstrap installs a program's Debian package only when that table lists the program: a call
missing from the table works on a machine that happens to have the program and fails on a fresh one
(issue 9: virt-xml-validate ran xmllint, which nothing installed).

The programs are found statically: in Python, the argv lists given to subprocess and to the lab's
run()/succeeds() helpers; in shell scripts, the words in command position. A program handed as an
argument to a script's own function (scripts/test's `stage NAME PROGRAM ...`) is not seen; each
such program is run directly elsewhere too.
"""

import ast
import itertools
import os
import re
import textwrap
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO_ROOT / "scripts" / "system-requirements.txt"
KINDS = ("command", "indirect", "python3", "pkg-config", "file")
PYTHON_DIRS = ("tests", "scripts", "bench")
# scripts/sanity puts .venv/bin first on PATH; these come from requirements-dev.txt, not from apt.
DEV_VENV_COMMANDS = {"ansible-test", "python"}

SUBPROCESS_RUNNERS = {"run", "Popen", "check_output", "check_call", "call"}
# run(argv) and succeeds(argv), where a module imports them from there.
LAB_SHELL = ("tests.lab.shell", {"run", "succeeds"})
# Enough words to reach the program behind a wrapper (ip netns exec NS PROGRAM); fewer argv lists to combine.
ARGV_WORDS = 8

SHELL_BUILTINS = {
    ":", ".", "[", "alias", "bg", "bind", "break", "builtin", "caller", "cd", "command", "compgen",
    "complete", "compopt", "continue", "declare", "dirs", "disown", "echo", "enable", "eval", "exec", "exit",
    "export", "false", "fc", "fg", "getopts", "hash", "help", "history", "jobs", "kill", "let", "local",
    "logout", "mapfile", "popd", "printf", "pushd", "pwd", "read", "readarray", "readonly", "return", "set",
    "shift", "shopt", "source", "suspend", "test", "times", "trap", "true", "type", "typeset", "ulimit",
    "umask", "unalias", "unset", "wait",
}
# Keywords after which the next word is again a command.
SHELL_PREFIX_KEYWORDS = {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"}
# Keywords whose words up to the end of the command are no commands.
SHELL_OTHER_KEYWORDS = {"for", "select", "case", "in", "fi", "done", "esac", "}", "[[", "function"}
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
FUNCTION_DEFINITION = re.compile(r"^\s*(?:function\s+([\w-]+)|([A-Za-z_][\w-]*)\s*\(\))", re.MULTILINE)
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")


def requirements():
    """The table's probes as (kind, what, package)."""
    entries = []
    for line in REQUIREMENTS.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            entries.append(tuple(line.split()))
    return entries


def table_commands():
    return {what for kind, what, _package in requirements() if kind == "command"}


# Programs outside PATH (squid's helpers in /usr/lib/squid), listed and run by their absolute paths.
TABLE_FILES = frozenset(what for kind, what, _package in requirements() if kind == "file")


def programs_of(words):
    """The programs one command line runs: its first word, and the command a wrapper runs.

    words are strings, None for a word the scan cannot know (a variable). Wrappers: ip netns exec NS,
    env, sudo, and the shell's exec and command. chroot's command comes from the chroot's own tree.
    """
    found = []
    while words and words[0] is not None:
        word, rest = words[0], words[1:]
        if "/" in word and not word.startswith("/"):
            break  # a script of this repository, run by its path
        if word in TABLE_FILES:
            found.append(word)  # a program the table probes as a file, by the path it is run by
            break
        name = os.path.basename(word)
        if name == "command" and rest[:1] in (["-v"], ["-V"]):
            break  # only looks the program up
        if name not in ("exec", "command"):
            found.append(name)
        if name == "ip" and rest[:2] == ["netns", "exec"]:
            words = rest[3:]
        elif name in ("exec", "command", "env", "sudo"):
            words = list(itertools.dropwhile(lambda w: w is not None and (w.startswith("-") or ASSIGNMENT.match(w)), rest))
        else:
            break
    return found


# --- Python -------------------------------------------------------------------------------------


class PythonModule:
    """What the names of one module can hold, for resolving argv expressions.

    Bindings are collected module-wide, without scopes: a name bound to several values yields every
    value, which can only find more programs, never fewer.
    """

    def __init__(self, tree):
        self.bindings = {}
        self.returns = {}
        loops = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.bindings.setdefault(target.id, []).append(node.value)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.returns[node.name] = [sub.value for sub in ast.walk(node) if isinstance(sub, ast.Return) and sub.value]
            elif isinstance(node, ast.For):
                loops.append(node)
        # for binary, pidfile in DAEMONS: binary takes the first item of each element of DAEMONS.
        for loop in loops:
            for element in self._sequence(loop.iter):
                if isinstance(loop.target, ast.Name):
                    self.bindings.setdefault(loop.target.id, []).append(element)
                elif isinstance(loop.target, ast.Tuple) and isinstance(element, (ast.Tuple, ast.List)):
                    for target, item in zip(loop.target.elts, element.elts):
                        if isinstance(target, ast.Name):
                            self.bindings.setdefault(target.id, []).append(item)

    def _sequence(self, node, depth=0):
        if isinstance(node, ast.Name) and depth < 5:
            return [element for value in self.bindings.get(node.id, []) for element in self._sequence(value, depth + 1)]
        if isinstance(node, (ast.Tuple, ast.List)):
            return node.elts
        return []

    def strings(self, node, depth=0):
        """The strings node can be, each once; [None] when it is not known."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Name) and depth < 5 and node.id in self.bindings:
            return list(dict.fromkeys(value for bound in self.bindings[node.id] for value in self.strings(bound, depth + 1)))
        return [None]

    def argvs(self, node, depth=0):
        """The argv lists node can be, each the first ARGV_WORDS words (None for an unknown word), each once."""
        if depth > 5:
            return [[None]]
        if isinstance(node, (ast.List, ast.Tuple)):
            words = []
            for element in node.elts[:ARGV_WORDS]:
                if isinstance(element, ast.Starred):
                    words.append([None])
                    break
                words.append(self.strings(element, depth + 1))
            found = itertools.product(*words)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            found = (left + right for left in self.argvs(node.left, depth + 1) for right in self.argvs(node.right, depth + 1))
        elif isinstance(node, ast.IfExp):
            found = self.argvs(node.body, depth + 1) + self.argvs(node.orelse, depth + 1)
        elif isinstance(node, ast.Name) and node.id in self.bindings:
            found = (argv for bound in self.bindings[node.id] for argv in self.argvs(bound, depth + 1))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.returns:
            found = (argv for value in self.returns[node.func.id] for argv in self.argvs(value, depth + 1))
        else:
            found = [[None]]
        return [list(argv) for argv in dict.fromkeys(tuple(argv[:ARGV_WORDS]) for argv in found)]


def _lab_runners(tree):
    """The names this module gave to tests/lab/shell.py's runners."""
    module, runners = LAB_SHELL
    return {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == module
            for alias in node.names if alias.name in runners}


def _is_runner(func, lab_runners):
    if isinstance(func, ast.Attribute):
        return isinstance(func.value, ast.Name) and func.value.id == "subprocess" and func.attr in SUBPROCESS_RUNNERS
    return isinstance(func, ast.Name) and func.id in lab_runners


def python_programs(source):
    """{program: [line, ...]} of the programs a Python source runs."""
    tree = ast.parse(source)
    module = PythonModule(tree)
    lab_runners = _lab_runners(tree)
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_runner(node.func, lab_runners):
            argv = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "args"), None)
            if argv is None:
                continue
            for words in module.argvs(argv):
                for program in programs_of(words):
                    found.setdefault(program, []).append(node.lineno)
    return found


# --- shell --------------------------------------------------------------------------------------


def _without_heredocs(text):
    """text with the bodies of its here-documents blanked (they hold data, not commands); lines keep their numbers."""
    lines, delimiters = [], []
    for line in text.splitlines():
        if delimiters:
            if line.strip() == delimiters[0]:
                delimiters.pop(0)
            lines.append("")
            continue
        lines.append(line)
        delimiters = [match.group(2) for match in HEREDOC.finditer(line)]
    return "\n".join(lines) + "\n"


class ShellLexer:
    """Splits shell text into simple commands: (words, what ended the command, line).

    Quoting, $(...), ${...}, $((...)), comments and redirections are understood well enough to find
    the words in command position. A word holding an expansion is None, except an assignment, which
    keeps its literal part (NAME=...) so that the word after it is still seen in command position.
    """

    def __init__(self, text):
        self.text = text
        self.pos = 0
        self.commands = []

    def _peek(self, offset=0):
        index = self.pos + offset
        return self.text[index] if index < len(self.text) else ""

    def _skip_balanced(self, opening, closing):
        """Skip from just after an opening bracket to just after its match."""
        depth = 1
        while depth and self.pos < len(self.text):
            char = self.text[self.pos]
            depth += (char == opening) - (char == closing)
            self.pos += 1

    def _expansion(self):
        """At a '$': skip the expansion (running the commands of a $(...) into self.commands)."""
        self.pos += 1
        if self._peek() == "(" and self._peek(1) == "(":
            self.pos += 2
            self._skip_balanced("(", ")")
            self.pos += 1  # the second closing parenthesis of $(( ))
        elif self._peek() == "(":
            self.pos += 1
            self.commands_until(closer=")")
        elif self._peek() == "{":
            self.pos += 1
            self._skip_balanced("{", "}")
        else:
            while self._peek() and (self._peek().isalnum() or self._peek() == "_"):
                self.pos += 1
            if self._peek() in ("@", "*", "#", "?", "$", "!", "-") and self.text[self.pos - 1] == "$":
                self.pos += 1

    def _double_quoted(self, word):
        """Read a "..." string after its opening quote; return whether it held an expansion."""
        expanded = False
        while self.pos < len(self.text) and self._peek() != '"':
            char = self._peek()
            if char == "\\":
                word.append(self._peek(1))
                self.pos += 2
            elif char == "$" and self._peek(1) not in ('"', ""):
                self._expansion()
                expanded = True
            elif char == "`":
                self.pos = self.text.index("`", self.pos + 1) + 1
                expanded = True
            else:
                word.append(char)
                self.pos += 1
        self.pos += 1
        return expanded

    def commands_until(self, closer=None):
        """Read commands until the unmatched closer (')' of a $(...)) or the end of the text."""
        words, word, expanded, in_word, redirect_target = [], [], False, False, False
        depth = 0
        line = None

        def end_word():
            nonlocal word, expanded, in_word, redirect_target, line
            if in_word and not redirect_target:
                text = "".join(word)
                words.append(None if expanded and not ASSIGNMENT.match(text) else text)
                if line is None:
                    line = self.text.count("\n", 0, self.pos) + 1
            if in_word:
                redirect_target = False
            word, expanded, in_word = [], False, False

        def end_command(terminator):
            nonlocal words, redirect_target, line
            end_word()
            self.commands.append((words, terminator, line))
            words, redirect_target, line = [], False, None

        while self.pos < len(self.text):
            char = self._peek()
            if char in " \t":
                end_word()
                self.pos += 1
            elif char == "\\":
                if self._peek(1) != "\n":
                    word.append(self._peek(1))
                    in_word = True
                self.pos += 2
            elif char == "#" and not in_word:
                self.pos = self.text.find("\n", self.pos)
            elif char == "'":
                end = self.text.index("'", self.pos + 1)
                word.append(self.text[self.pos + 1:end])
                in_word = True
                self.pos = end + 1
            elif char == '"':
                self.pos += 1
                expanded |= self._double_quoted(word)
                in_word = True
            elif char == "$":
                self._expansion()
                expanded = in_word = True
            elif char == "`":
                self.pos = self.text.index("`", self.pos + 1) + 1
                expanded = in_word = True
            elif char in "<>":
                if in_word and "".join(word).isdigit() and not expanded:
                    word, in_word = [], False  # a file descriptor number, as in 2>&1
                end_word()
                if self._peek(1) == "(":  # process substitution
                    self.pos += 2
                    self.commands_until(closer=")")
                    continue
                while self._peek() in ("<", ">", "&", "|"):
                    self.pos += 1
                redirect_target = True
            elif char == "(" and in_word and "".join(word).endswith("="):
                # array assignment: its words are data
                self.pos += 1
                outer = self.commands
                self.commands = []
                self.commands_until(closer=")")
                self.commands = outer
                expanded = True
            elif char == "(":
                end_command("(")
                depth += 1
                self.pos += 1
            elif char == ")":
                self.pos += 1
                if depth == 0 and closer == ")":
                    end_command(")")
                    return
                depth -= 1
                end_command(")")
            elif char in "\n;&|":
                operator = char
                if self._peek(1) == char and char in ";&|":
                    operator += char
                self.pos += len(operator)
                end_command(operator)
            else:
                word.append(char)
                in_word = True
                self.pos += 1
        end_command("\n")


def shell_programs(text):
    """{program: [line, ...]} of the programs a shell script runs."""
    text = _without_heredocs(text)
    functions = {keyword_form or parentheses_form for keyword_form, parentheses_form in FUNCTION_DEFINITION.findall(text)}
    lexer = ShellLexer(text)
    lexer.commands_until()
    found = {}
    in_case_patterns = False
    for words, terminator, line in lexer.commands:
        if in_case_patterns:
            # a pattern ends at ')'; alternatives (a | b) end earlier at '|'
            if words[:1] == ["esac"] or terminator == ")":
                in_case_patterns = False
            continue
        while words and (words[0] in SHELL_PREFIX_KEYWORDS or (words[0] and ASSIGNMENT.match(words[0]))):
            words = words[1:]
        if words[:1] == ["case"]:
            in_case_patterns = terminator != ")"
            continue
        if terminator == ";;":
            in_case_patterns = True
        if not words or words[0] in SHELL_OTHER_KEYWORDS:
            continue
        for program in programs_of(words):
            if program not in SHELL_BUILTINS and program not in functions:
                found.setdefault(program, []).append(line)
    return found


def is_shell_script(path):
    with open(path, "rb") as handle:
        first_line = handle.readline()
    return path.suffix == ".sh" or (first_line.startswith(b"#!") and first_line.rstrip().endswith((b"bash", b"sh")))


def code_files():
    """(Python files, shell scripts) of the tests, the lab, the benchmarks and the scripts."""
    python = sorted(path for directory in PYTHON_DIRS for path in (REPO_ROOT / directory).rglob("*.py")
                    if not path.is_relative_to(REPO_ROOT / "tests" / "output"))  # ansible-test's output
    shell = sorted(path for path in list((REPO_ROOT / "scripts").iterdir()) + list((REPO_ROOT / "tests" / "lab").glob("*.sh"))
                   + [REPO_ROOT / ".ci" / "run"] if path.is_file() and path.suffix != ".py" and is_shell_script(path))
    return python, shell


def programs_run():
    """{program: ["path:where", ...]} over every Python file and shell script of the tests, the lab and the scripts."""
    python, shell = code_files()
    found = {}
    for path in python:
        for program, lines in python_programs(path.read_text()).items():
            found.setdefault(program, []).extend("%s:%d" % (path.relative_to(REPO_ROOT), line) for line in lines)
    for path in shell:
        for program, lines in shell_programs(path.read_text()).items():
            found.setdefault(program, []).extend("%s:%d" % (path.relative_to(REPO_ROOT), line) for line in lines)
    return found


# --- tests --------------------------------------------------------------------------------------


def test_requirements_table_is_well_formed():
    entries = requirements()
    assert entries
    for entry in entries:
        assert len(entry) == 3 and entry[0] in KINDS, "bad line in %s: %s" % (REQUIREMENTS, " ".join(entry))
    probes = [entry[:2] for entry in entries]
    assert len(probes) == len(set(probes)), "a probe listed twice"


@pytest.fixture(scope="module")
def programs():
    return programs_run()


def test_every_program_the_code_runs_is_in_the_table(programs):
    listed = table_commands() | TABLE_FILES | DEV_VENV_COMMANDS
    missing = {program: sorted(set(where)) for program, where in programs.items() if program not in listed}
    assert not missing, "run but not in %s (add `command PROGRAM DEBIAN-PACKAGE`): %s" % (
        REQUIREMENTS.relative_to(REPO_ROOT), "; ".join("%s (%s)" % (p, ", ".join(w)) for p, w in sorted(missing.items())))


def test_every_command_in_the_table_is_run(programs):
    unused = table_commands() - set(programs)
    assert not unused, "listed as `command` in %s but run nowhere (remove it, or make it `indirect` with who runs it): %s" % (
        REQUIREMENTS.relative_to(REPO_ROOT), ", ".join(sorted(unused)))


PYTHON_CASES = {
    "subprocess list": ('import subprocess\nsubprocess.run(["qemu-img", "info", path], check=True)\n', {"qemu-img"}),
    "absolute path": ('import subprocess\nsubprocess.Popen(["/usr/sbin/sshd", "-D"])\n', {"sshd"}),
    "file probe": ('HELPER = "/usr/lib/squid/basic_ncsa_auth"\nsubprocess.run([HELPER, path])\n', {"/usr/lib/squid/basic_ncsa_auth"}),
    "netns wrapper and bound name": (
        'PY = "/usr/bin/python3"\nsubprocess.Popen(["ip", "netns", "exec", ns, PY, "-m", "http.server"])\n', {"ip", "python3"}),
    "prefix in a conditional": ('from tests.lab.shell import succeeds\nprefix = ["ip", "-n", ns] if ns else ["ip"]\n'
                                'succeeds(prefix + ["link"])\n', {"ip"}),
    "argv from a function": ('from tests.lab.shell import run\ndef argv():\n    return ["dnsmasq", "--conf-file=/dev/null"]\n\n'
                             'run(["ip", "netns", "exec", NS] + argv())\n', {"ip", "dnsmasq"}),
    "another run": ('def run(hv, request):\n    return hv.apply(request)\n\nrun(["virsh"], {})\n', set()),
    "loop over pairs": ('DAEMONS = (("virtlogd", "a"), ("libvirtd", "b"))\nfor binary, pidfile in DAEMONS:\n'
                        '    subprocess.run([binary, "-d"], check=True)\n', {"virtlogd", "libvirtd"}),
    "unknown program": ('subprocess.run([sys.executable, "-c", code])\nsubprocess.run([os.path.join(BIN, "ansible")])\n', set()),
}


@pytest.mark.parametrize("source, expected", PYTHON_CASES.values(), ids=PYTHON_CASES.keys())
def test_python_scan_finds(source, expected):
    assert set(python_programs(source)) == expected


SHELL_CASES = {
    "pipeline and lists": ("a=$(find . -name x | sort -u) && grep -q y f || sed -n 1p f; tail f\n",
                           {"find", "sort", "grep", "sed", "tail"}),
    "nested substitution in quotes": ('repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)\n', {"dirname"}),
    "keywords, builtins, functions": (
        'f() { echo "$1 (x; y)" > "$2"; }\nfunction g {\n  :\n}\nif [ -x a ]; then f b; fi\nfor i in $(seq 3); do g; mkdir "$i"; done\n'
        'while read -r l; do umount -l "$l"; done < <(awk \'{ print $2 }\' /proc/mounts)\n',
        {"seq", "mkdir", "umount", "awk"}),
    "wrappers": ('exec sudo --preserve-env=X "$0"\nip netns exec "$ns" curl -sf "$url"\nenv A=1 rsync a b\n'
                 'command -v git >/dev/null\nchroot "$root" env apt-get update\n"$venv/bin/python" -m x\nscripts/lab up\n',
                 {"sudo", "ip", "curl", "env", "rsync", "chroot"}),
    "case patterns": ('case $1 in\n  up) shift ;;\n  destroy | --destroy) id -u; shift ;;\n  *) exit 2 ;;\nesac\n', {"id"}),
    "here-document, arrays, arithmetic": (
        'cat > f <<\'CFG\'\nsquid runs; this is data\nCFG\nlist=(\n  # a (comment)\n  qemu-utils git\n)\n'
        'n=$((a * (b + 1)))\nprintf \'%s\\n\' "$((n / 2))" | dd of=x status=none\n', {"cat", "dd"}),
}


@pytest.mark.parametrize("text, expected", SHELL_CASES.values(), ids=SHELL_CASES.keys())
def test_shell_scan_finds(text, expected):
    assert set(shell_programs(textwrap.dedent(text))) == expected
