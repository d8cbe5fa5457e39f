# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""password_hash against the SHA-512-crypt of the specification, of openssl and of the squid helper that checks it.

Drepper's published vectors and ``openssl passwd -6`` hold sha512_crypt to the algorithm; squid's own
basic_ncsa_auth (Debian's squid 5.7) holds squid_user_hash to what a proxy accepts. The rest: the same inputs
give the same hash on every run, and no error shows the clear text password.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import subprocess
import traceback
from urllib.parse import quote

import pytest

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.password_hash import (
    CRYPT_ALPHABET,
    SQUID_ROUNDS,
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


@pytest.mark.parametrize("owner, user, password", [
    ("egress-us", "alice", SECRET),
    ("egress-eu", "bob", SECRET),
    ("egress-eu", "alice", SECRET + "!"),
    ("egress-e", "ualice", SECRET),  # the NUL between owner and user keeps the parts apart
])
def test_another_owner_user_or_password_gets_another_salt(owner, user, password):
    assert salt_of(squid_user_hash(owner, user, password)) != salt_of(squid_user_hash("egress-eu", "alice", SECRET))


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
