# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""password_hash against the SHA-512-crypt of the specification, of openssl, of libxcrypt and of the squid helper.

Drepper's published vectors and ``openssl passwd -6`` hold sha512_crypt to the algorithm; squid's own
basic_ncsa_auth (Debian's squid 5.7) holds squid_user_hash to what a proxy accepts, and libxcrypt's crypt(3) to the
longest password it checks. The rest: the same inputs give the same hash on every run, the salt tells nothing of
the password (issue 40: it was a password oracle), and no error shows the clear text password.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import ctypes.util
import hashlib
import hmac
import subprocess
import time
import traceback
from urllib.parse import quote

import pytest

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.password_hash import (
    CRYPT_ALPHABET,
    PASSWORD_MAX_BYTES,
    SQUID_ROUNDS,
    _derived_salt,
    password_problem,
    sha512_crypt,
    squid_user_hash,
)

HELPER = "/usr/lib/squid/basic_ncsa_auth"
SECRET = "s3cret pässword: €"

# "Unix crypt using SHA-256 and SHA-512", the SHA-512 test vectors whose rounds are at least 1000. crypt(3) cuts a
# salt to 16 characters and raises rounds below 1000 to 1000; sha512_crypt refuses both, so the vectors' salts are
# given cut, and "rounds=10" (whose expected hash says rounds=1000) is asked for with 1000. The first vector uses
# crypt's default of 5000 and its hash omits the rounds, which sha512_crypt always writes.
DREPPER_VECTORS = [
    ("Hello world!", "saltstring", 5000,
     "$6$rounds=5000$saltstring$svn8UoSVapNtMuq1ukKS4tPQd8iKwSMHWjl/O817G3uBnIFNjnQJuesI68u4OTLiBFdcbYEdFCoEOfaS35inz1"),
    ("Hello world!", "saltstringsaltst", 10000,
     "$6$rounds=10000$saltstringsaltst$OW1/O6BYHV6BcXZu8QVeXbDWra3Oeqh0sbHbbMCVNSnCM/UrjmM0Dp8vOuZeHBy/YTBmSK6H9qs/y3RnOaw5v."),
    ("This is just a test", "toolongsaltstrin", 5000,
     "$6$rounds=5000$toolongsaltstrin$lQ8jolhgVRVhY4b5pZKaysCLi0QBxGoNeKQzQ3glMhwllF7oGDZxUhx1yxdYcz/e1JSbq3y6JMxxl8audkUEm0"),
    ("a very much longer text to encrypt.  This one even stretches over morethan one line.", "anotherlongsalts", 1400,
     "$6$rounds=1400$anotherlongsalts$POfYwTEok97VWcjxIiSOjiykti.o/pQs.wPvMxQ6Fm7I6IoYN3CmLs66x9t0oSwbtEW7o7UmJEiDwGqd8p4ur1"),
    ("we have a short salt string but not a short password", "short", 77777,
     "$6$rounds=77777$short$WuQyW2YR.hBNpjjRhpYD/ifIw05xdfeEyQoMxIXbkvr0gge1a1x3yRULJ5CCaUeOxFmtlcGZelFl5CxtgfiAc0"),
    ("a short string", "asaltof16chars..", 123456,
     "$6$rounds=123456$asaltof16chars..$BtCwjqMJGx5hrJhZywWvt0RLE8uZ4oPwcelCjmw2kSYu.Ec6ycULevoBK25fs2xXgMNrCzIMVcgEJAstJeonj1"),
    ("the minimum number is still observed", "roundstoolow", 1000,
     "$6$rounds=1000$roundstoolow$kUMsbe306n21p9R.FRkW3IGn.S9NPN0x50YhH1xhLsPuWGsUSklZt58jaTfF4ZEQpyUNGc0dqbpBYYBaHHrsX."),
]


@pytest.mark.parametrize("password, salt, rounds, expected", DREPPER_VECTORS, ids=[vector[1] for vector in DREPPER_VECTORS])
def test_drepper_vectors(password, salt, rounds, expected):
    assert sha512_crypt(password, salt, rounds) == expected


def openssl_sha512_crypt(password, salt):
    """openssl's SHA-512-crypt; salt may start with rounds=N$, as crypt's does. The password goes as UTF-8 bytes."""
    result = subprocess.run(["openssl", "passwd", "-6", "-salt", salt, password.encode("utf-8")],
                            check=True, stdout=subprocess.PIPE)
    return result.stdout.decode("ascii").strip()


@pytest.mark.parametrize("password, salt", [
    ("Hello world!", "saltstring"),
    ("pässwörd mit Umlaut", "abcdefghijklmnop"),
    ("€ 日本語 🙂", "./09AZaz"),
    ("with space:and colon", "x"),
    ("x" * 200, "Zz"),  # longer than a SHA-512 digest: step 9 repeats digest B
])
def test_what_openssl_computes(password, salt):
    # openssl writes no rounds for its default of 5000, sha512_crypt always does: the hashes after the salt compare.
    expected = openssl_sha512_crypt(password, salt)
    assert expected.startswith("$6$%s$" % salt)
    assert sha512_crypt(password, salt, 5000).split("$")[-1] == expected.split("$")[-1]


def test_what_openssl_computes_at_the_rounds_squid_users_get():
    password, salt = "pässwörd mit Umlaut", "abcdefghijklmnop"
    expected = openssl_sha512_crypt(password, "rounds=%d$%s" % (SQUID_ROUNDS, salt))
    assert sha512_crypt(password, salt, SQUID_ROUNDS) == expected


def test_rounds_are_written_even_at_crypts_default():
    assert sha512_crypt("x", "salt", 5000).startswith("$6$rounds=5000$salt$")


# (user, password) of a proxy's users; the helper gets each URL-escaped.
USERS = [
    ("alice", "correct horse battery staple"),
    ("bob", "with space:and colon ü €"),
    ("carol.ops-1", "100% 'quoted' \"too\" + plus & amp"),
]


def helper_answers(password_file, lines):
    """basic_ncsa_auth's answer to each (user, password): the rfc1738-escaped ``user password`` lines squid writes."""
    request = "".join("%s %s\n" % (quote(user, safe=""), quote(password, safe="")) for user, password in lines)
    result = subprocess.run([HELPER, str(password_file)], input=request.encode("ascii"), capture_output=True,
                            check=True, timeout=60)
    return result.stdout.decode("utf-8").splitlines()


def test_squids_helper_accepts_the_right_password_and_refuses_a_wrong_one(tmp_path):
    password_file = tmp_path / "passwords"
    password_file.write_text("".join("%s:%s\n" % (user, squid_user_hash("egress-eu", user, password)) for user, password in USERS))
    right = list(USERS)
    wrong = [("alice", "correct horse battery stapl"), ("bob", "with space:and colon u €"), ("carol.ops-1", USERS[0][1]),
             ("dave", "correct horse battery staple")]
    # The helper answers "OK " or "ERR " and a reason ("Wrong password", "No such user").
    answers = [answer.split()[0] for answer in helper_answers(password_file, right + wrong)]
    assert answers == ["OK"] * len(right) + ["ERR"] * len(wrong)


def test_same_inputs_same_hash():
    first = squid_user_hash("egress-eu", "alice", SECRET)
    squid_user_hash.cache_clear()  # a new run of the role: the hash is computed again, not remembered
    assert squid_user_hash("egress-eu", "alice", SECRET) == first
    assert first.startswith("$6$rounds=%d$" % SQUID_ROUNDS)


def salt_of(crypt_hash):
    return crypt_hash.split("$")[3]


def test_the_salt_is_sixteen_crypt_characters():
    salt = salt_of(squid_user_hash("egress-eu", "alice", SECRET))
    assert len(salt) == 16 and set(salt) <= set(CRYPT_ALPHABET)


@pytest.mark.parametrize("owner, user", [
    ("egress-us", "alice"),
    ("egress-eu", "bob"),
    ("egress-e", "ualice"),  # the NUL between owner and user keeps the parts apart
])
def test_another_owner_or_user_gets_another_salt(owner, user):
    assert salt_of(squid_user_hash(owner, user, SECRET)) != salt_of(squid_user_hash("egress-eu", "alice", SECRET))


# The attack of issue 40. A hash line from the users' file (a seed volume, a log at -v) and the public owner and user:
# until then the salt was HMAC-SHA256 keyed by the password over "owner NUL user", so one HMAC tested a guess, and the
# rounds protected nothing.
OWNER, USER = "egress_proxies.kvm.egress_proxy", "ci"
DICTIONARY = ["%s%d" % (word, number) for word in ("summer", "winter", "proxy", "letmein", "dragon") for number in range(4000)]
LEAKED = DICTIONARY[17321]


def salt_oracle(hash_line, owner, user, dictionary):
    """The guess whose salt, derived as it was before issue 40, is the hash line's: one HMAC per guess, no crypt."""
    salt = salt_of(hash_line)
    message = (owner + "\0" + user).encode("utf-8")
    for guess in dictionary:
        digest = hmac.new(guess.encode("utf-8"), message, hashlib.sha256).digest()
        if "".join(CRYPT_ALPHABET[byte & 0x3F] for byte in digest[:16]) == salt:
            return guess
    return None


def test_the_salt_oracle_recovered_a_password_in_milliseconds_before_issue_40():
    # A hash line made as before issue 40: the oracle finds its password among 20000 guesses without one crypt.
    old_salt = "".join(CRYPT_ALPHABET[byte & 0x3F] for byte in hmac.new(
        LEAKED.encode("utf-8"), (OWNER + "\0" + USER).encode("utf-8"), hashlib.sha256).digest()[:16])
    old_line = sha512_crypt(LEAKED, old_salt, SQUID_ROUNDS)
    started = time.perf_counter()
    assert salt_oracle(old_line, OWNER, USER, DICTIONARY) == LEAKED
    print("the old salt gave the password away in %.0f ms" % ((time.perf_counter() - started) * 1000))


def test_the_salt_tells_nothing_of_the_password_so_a_guess_costs_a_whole_crypt():
    line = squid_user_hash(OWNER, USER, LEAKED)
    # The attack of issue 40 on today's hash line finds nothing.
    assert salt_oracle(line, OWNER, USER, DICTIONARY) is None
    # The salt is the same for every password of this owner and user: a function of public values, it carries no
    # information about the password.
    assert _derived_salt(OWNER, USER) == salt_of(line)
    assert salt_of(squid_user_hash(OWNER, USER, "another password")) == salt_of(line)
    # So the only test of a guess is SHA-512-crypt at SQUID_ROUNDS of it, under the line's salt.
    assert sha512_crypt(LEAKED, salt_of(line), SQUID_ROUNDS) == line
    assert sha512_crypt(DICTIONARY[0], salt_of(line), SQUID_ROUNDS) != line


def libxcrypt():
    """crypt(3) of the machine's libcrypt.so.1 through ctypes, or None when there is none."""
    path = ctypes.util.find_library("crypt")
    if path is None:
        return None
    library = ctypes.CDLL(path)
    library.crypt.restype = ctypes.c_char_p
    library.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    return library.crypt


@pytest.mark.skipif(libxcrypt() is None, reason="no libcrypt.so.1 on this machine")
def test_the_longest_password_is_the_longest_libxcrypt_checks():
    crypt = libxcrypt()
    setting = "$6$rounds=1000$abcdefghijklmnop"
    longest = "€" * 170 + "p"  # 511 bytes in UTF-8
    assert len(longest.encode("utf-8")) == PASSWORD_MAX_BYTES
    # At the limit libxcrypt computes the hash sha512_crypt does; one byte more and it answers "*0", which no hash is.
    assert crypt(longest.encode("utf-8"), setting.encode("ascii")).decode("ascii") == sha512_crypt(longest, setting[15:], 1000)
    for password in (longest + "p", "p" * (PASSWORD_MAX_BYTES + 1), "€" * 171):
        assert crypt(password.encode("utf-8"), setting.encode("ascii")) in (b"*0", b"*1", None)
        assert password_problem(password).startswith("the password is %d bytes or more" % (PASSWORD_MAX_BYTES + 1))
    assert password_problem(longest) is None


@pytest.mark.parametrize("password", ["p" * (PASSWORD_MAX_BYTES + 1), "€" * 171])
def test_squid_user_hash_refuses_a_password_the_proxy_could_never_check(password):
    with pytest.raises(ValueError) as caught:
        squid_user_hash("egress-eu", "alice", password)
    assert password[:20] not in str(caught.value) and "512 bytes or more" in str(caught.value)


def test_squids_helper_accepts_the_longest_password(tmp_path):
    longest = "€" * 170 + "p"
    password_file = tmp_path / "passwords"
    password_file.write_text("alice:%s\n" % squid_user_hash("egress-eu", "alice", longest))
    assert [answer.split()[0] for answer in helper_answers(password_file, [("alice", longest), ("alice", longest[:-1])])] == [
        "OK", "ERR"]


def rendered(error):
    """Everything a traceback of error would show, its chained exceptions included, and its arguments' reprs."""
    return "".join(traceback.format_exception(type(error), error, error.__traceback__)) + repr(error.args)


@pytest.mark.parametrize("call", [
    lambda: sha512_crypt(SECRET, "bad salt!", 5000),
    lambda: sha512_crypt(SECRET, "a" * 17, 5000),
    lambda: sha512_crypt(SECRET, "salt", 999),
    lambda: sha512_crypt(SECRET, "salt", 1000000000),
    lambda: sha512_crypt(SECRET, "salt", "5000"),
    lambda: sha512_crypt(SECRET.encode("utf-8"), "salt", 5000),
    lambda: sha512_crypt(SECRET + "\udc80", "salt", 5000),
    lambda: squid_user_hash("egress\0eu", "alice", SECRET),
    lambda: squid_user_hash("egress-eu", None, SECRET),
    lambda: squid_user_hash("egress-eu", "alice", SECRET + "\udc80"),
], ids=["salt-alphabet", "salt-length", "rounds-low", "rounds-high", "rounds-text", "password-bytes", "password-surrogate",
        "owner-nul", "user-none", "user-hash-surrogate"])
def test_no_error_shows_the_password(call):
    with pytest.raises((ValueError, TypeError)) as caught:
        call()
    text = rendered(caught.value)
    assert SECRET not in text
    assert SECRET.encode("utf-8").decode("ascii", "backslashreplace") not in text  # nor its bytes' repr
    assert caught.value.__context__ is None and caught.value.__cause__ is None
