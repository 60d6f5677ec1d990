"""A throwaway certificate authority for the test control plane (ECDSA P-256).

Modelled on envtest's TinyCA (docs/development.md): one CA signs the apiserver's and the
webhooks' serving certificates (for localhost and 127.0.0.1 only: all traffic stays on loopback)
and the client certificates whose CN/O the apiserver reads as user and groups.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long enough for a person to keep `python -m tests.up` running for weeks.
VALIDITY: Final = datetime.timedelta(days=30)
# Tolerate a little clock skew between the test process and the Go processes.
BACKDATE: Final = datetime.timedelta(hours=1)
LOOPBACK_NAMES: Final = ("localhost",)
LOOPBACK_IPS: Final = ("127.0.0.1",)


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyPair:
    """A PEM certificate (or public key) and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, cert_path: Path, key_path: Path) -> None:
        """Write both halves; the key readable by this user only."""
        cert_path.parent.mkdir(parents=True, exist_ok=True)
        key_path.parent.mkdir(parents=True, exist_ok=True)
        cert_path.write_bytes(self.cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(self.key_pem)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name(attributes)


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates."""

    def __init__(self, common_name: str = "dispatch-k8s test CA") -> None:
        self._key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        self._name = _name(common_name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        """The CA certificate: the caBundle and the kubeconfig's certificate-authority-data."""
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def serving(
        self,
        common_name: str = "localhost",
        *,
        dns_names: tuple[str, ...] = LOOPBACK_NAMES,
        ips: tuple[str, ...] = LOOPBACK_IPS,
    ) -> KeyPair:
        """A TLS server certificate for loopback names and addresses."""
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        return self._issue(
            _name(common_name),
            usage=ExtendedKeyUsageOID.SERVER_AUTH,
            sans=x509.SubjectAlternativeName(sans),
        )

    def client(self, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        """A TLS client certificate; the apiserver reads CN as the user and O as the groups."""
        return self._issue(_name(user, groups), usage=ExtendedKeyUsageOID.CLIENT_AUTH, sans=None)

    def _issue(
        self,
        subject: x509.Name,
        *,
        usage: x509.ObjectIdentifier,
        sans: x509.SubjectAlternativeName | None,
    ) -> KeyPair:
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if sans is not None:
            builder = builder.add_extension(sans, critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(
            cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_key_pem(key)
        )


def service_account_signing_key() -> KeyPair:
    """The key pair that signs ServiceAccount tokens: `cert_pem` holds the public key."""
    key = _new_key()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(cert_pem=public, key_pem=_key_pem(key))
