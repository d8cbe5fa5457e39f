# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The password hash squid's basic_ncsa_auth helper accepts for an egress proxy's user, computed on the controller.

basic_ncsa_auth checks a password with the proxy's crypt(3), which takes SHA-512-crypt (``$6$``). The hash is
made here, in pure Python, because the controller may have ansible-core alone: no passlib, and no ``crypt``
module (deprecated in 3.11, gone in 3.13). sha512_crypt follows Ulrich Drepper's specification, "Unix crypt using
SHA-256 and SHA-512", which glibc and libxcrypt implement.

squid_user_hash gives the same hash for the same (owner, user, password) on every run: its salt is derived from owner
and user alone, instead of drawn at random, so a second run of the role renders the same password file and changes
nothing. The salt holds nothing of the password: a guess at a password from its hash line costs a whole SHA-512-crypt
at SQUID_ROUNDS. No message raised here holds the clear text password.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import hashlib
import hmac

# crypt(3)'s base 64 alphabet, for the salt and the encoded hash.
CRYPT_ALPHABET = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
SALT_MAX_LENGTH = 16
ROUNDS_MIN = 1000
ROUNDS_MAX = 999999999
# At this figure one hash costs 0.1 to 0.2 s of one CPU here (measured on the tests' AMD EPYC machine: best 0.09 s,
# median 0.12 s on CPython 3.11; 0.14 s and 0.18 s on 3.9), against 0.03 to 0.07 s for libxcrypt's C: paid once per
# user and run, thanks to the cache below. It is 20 times crypt's default of 5000 rounds, so each guess against a
# leaked password file costs an attacker 20 times as much.
SQUID_ROUNDS = 100000
# libxcrypt's crypt(3), which squid's basic_ncsa_auth calls on Debian, Ubuntu, RHEL and Fedora, refuses a password of
# CRYPT_MAX_PASSPHRASE_SIZE (512) bytes or more: it answers "*0", which matches no hash, so such a user could never
# log in.
PASSWORD_MAX_BYTES = 511
# The key of the salt's HMAC: a fixed label, no secret. It keeps these salts apart from any other HMAC-SHA256 of the
# same owner and user; a new label would give every user a new hash, once.
SALT_KEY = b"egress_proxies.kvm squid_user_hash salt"

# The order in which the 64 bytes of the last digest are written, three at a time (the specification's step 22).
_ENCODING_ORDER = (
    (0, 21, 42), (22, 43, 1), (44, 2, 23), (3, 24, 45), (25, 46, 4), (47, 5, 26), (6, 27, 48),
    (28, 49, 7), (50, 8, 29), (9, 30, 51), (31, 52, 10), (53, 11, 32), (12, 33, 54), (34, 55, 13),
    (56, 14, 35), (15, 36, 57), (37, 58, 16), (59, 17, 38), (18, 39, 60), (40, 61, 19), (62, 20, 41),
)


def _repeated(digest, length):
    """digest repeated to exactly length bytes (the specification's P and S sequences, and step 9's B blocks)."""
    return (digest * (length // len(digest) + 1))[:length]


def _encode(final):
    """The 86 characters of crypt's base 64 for the 64 bytes of the last digest."""
    chars = []
    for first, second, third in _ENCODING_ORDER:
        word = (final[first] << 16) | (final[second] << 8) | final[third]
        for _index in range(4):
            chars.append(CRYPT_ALPHABET[word & 0x3F])
            word >>= 6
    word = final[63]
    for _index in range(2):
        chars.append(CRYPT_ALPHABET[word & 0x3F])
        word >>= 6
    return "".join(chars)


def _password_bytes(password):
    """password encoded UTF-8; the errors name neither the password nor any of its characters."""
    if not isinstance(password, str):
        raise TypeError("the password must be text, not %s" % type(password).__name__)
    try:
        return password.encode("utf-8")
    except UnicodeEncodeError:
        # The codec's error quotes the character and holds the whole password in its .object; raised out here, the
        # ValueError has no __context__ to carry it along (``from None`` would only hide it from the traceback).
        pass
    raise ValueError("the password is no valid text: it holds a lone surrogate, which UTF-8 cannot encode")


def password_problem(password):
    """Why a proxy's squid could never accept ``password``, as a phrase ("the password is ..."); None when it can.

    The phrase never quotes the password, nor says how long it is.
    """
    try:
        key = _password_bytes(password)
    except (TypeError, ValueError) as error:
        return str(error)
    if len(key) > PASSWORD_MAX_BYTES:
        return ("the password is %d bytes or more in UTF-8, and the proxy's crypt(3) checks at most %d: the user could "
                "never log in. Use a shorter password" % (PASSWORD_MAX_BYTES + 1, PASSWORD_MAX_BYTES))
    return None


def sha512_crypt(password, salt, rounds):
    """SHA-512-crypt of password: ``$6$rounds=N$salt$hash``, as crypt(3) of glibc or libxcrypt would compute it.

    password is text (encoded UTF-8, as a proxy's squid reads it from a request); salt is at most 16 characters
    of ``./0-9A-Za-z``; rounds is 1000..999999999. crypt(3) silently truncates a longer salt and clamps rounds;
    here both are refused, so that what was asked for is what the hash holds. The rounds are always written,
    even crypt's default of 5000, so that the hash does not depend on which default its reader assumes.
    """
    if not isinstance(salt, str) or len(salt) > SALT_MAX_LENGTH or any(char not in CRYPT_ALPHABET for char in salt):
        raise ValueError("the salt must be at most %d characters of %s, not %r" % (SALT_MAX_LENGTH, CRYPT_ALPHABET, salt))
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not ROUNDS_MIN <= rounds <= ROUNDS_MAX:
        raise ValueError("the rounds must be a whole number from %d to %d, not %r" % (ROUNDS_MIN, ROUNDS_MAX, rounds))
    key = _password_bytes(password)
    salt_bytes = salt.encode("ascii")

    # Steps 1-12: digest A, from the key, the salt and digest B of key, salt, key.
    alternate = hashlib.sha512(key + salt_bytes + key).digest()
    context = hashlib.sha512(key + salt_bytes + _repeated(alternate, len(key)))
    length = len(key)
    while length:
        context.update(alternate if length & 1 else key)
        length >>= 1
    current = context.digest()

    # Steps 13-20: the P and S sequences.
    key_sequence = _repeated(hashlib.sha512(key * len(key)).digest(), len(key))
    salt_sequence = _repeated(hashlib.sha512(salt_bytes * (16 + current[0])).digest(), len(salt_bytes))

    # Step 21. What round i feeds before and after the previous digest depends only on i modulo 2, 3 and 7:
    # the 42 pairs are built once, which makes each round one call of hashlib.
    cycle = []
    for index in range(42):
        middle = (salt_sequence if index % 3 else b"") + (key_sequence if index % 7 else b"")
        cycle.append((key_sequence + middle, b"") if index & 1 else (b"", middle + key_sequence))
    sha512 = hashlib.sha512
    for index in range(rounds):
        before, after = cycle[index % 42]
        current = sha512(before + current + after).digest()

    return "$6$rounds=%d$%s$%s" % (rounds, salt, _encode(current))


def _derived_salt(owner, user):
    """16 crypt characters from HMAC-SHA256, keyed by SALT_KEY, of ``owner NUL user``: the same on every run.

    Not from the password: the owner and the user are public (the domain's metadata, the status table, the scrape
    targets' labels), so a salt computed from the password would let anyone test a guess with one HMAC, and skip
    the rounds. owner and user make salts differ between users and between deployments, so that equal passwords do
    not give equal hashes. 16 characters of 64 use 96 of the HMAC's 256 bits, crypt's maximum.
    """
    digest = hmac.new(SALT_KEY, (owner + "\0" + user).encode("utf-8"), hashlib.sha256).digest()
    return "".join(CRYPT_ALPHABET[byte & 0x3F] for byte in digest[:SALT_MAX_LENGTH])


# A template may render a user's hash more than once in a run; every call after the first is free.
@functools.lru_cache(maxsize=256)
def squid_user_hash(owner, user, password):
    """The hash of password for user of owner's egress proxy, the same on every run: for squid's password file.

    SHA-512-crypt at SQUID_ROUNDS rounds, with the salt _derived_salt gives. owner and user are text without NUL:
    the NUL separates them in the salt's message, so that ("a", "bc") and ("ab", "c") get different salts. A password
    that password_problem refuses is refused here too.
    """
    for name, value in (("owner", owner), ("user", user)):
        if not isinstance(value, str):
            raise TypeError("the %s must be text, not %s" % (name, type(value).__name__))
        if "\0" in value:
            raise ValueError("the %s must not hold a NUL character: %r" % (name, value))
    problem = password_problem(password)
    if problem is not None:
        raise ValueError(problem)
    return sha512_crypt(password, _derived_salt(owner, user), SQUID_ROUNDS)
