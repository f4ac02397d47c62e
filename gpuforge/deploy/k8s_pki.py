"""The Kubernetes cluster's shared keys, made and kept on the control host.

gpuforge generates the cluster CA (and the other keys every control plane shares) instead of
letting ``kubeadm init`` make them on a node, and pushes them before ``kubeadm init``: kubeadm
uses a pair that exists (``k8s_upstream.SOURCES['kubeadm-certs']``), and other control planes get
the same files (``SOURCES['kubeadm-ha']``, manual certificate distribution). So the CA's hash,
which every ``kubeadm join`` pins (``SOURCES['kubeadm-join']``), is known before any node is
touched, and no join has to read anything back from a node.

Keys live in the cluster's private secrets directory (0700, files 0600); they are written to
nodes only as files with tight modes (keys 0600) and never printed.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from gpuforge.spec import k8s_upstream as facts

CA_YEARS = 10
RSA_BITS = 2048
#: kubeadm's own common names for its CAs (cmd/kubeadm/app/phases/certs/certlist.go).
CA_NAMES = {"ca": "kubernetes", "front-proxy-ca": "front-proxy-ca", "etcd/ca": "etcd-ca"}


def _key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def make_ca(common_name: str, now: datetime | None = None) -> tuple[bytes, bytes]:
    """A self-signed CA as kubeadm makes one: (certificate PEM, RSA key PEM)."""
    start = (now or datetime.now(UTC)) - timedelta(minutes=5)
    key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + timedelta(days=365 * CA_YEARS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=True,
                key_cert_sign=True,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def make_service_account_keys() -> tuple[bytes, bytes]:
    """(sa.key PEM, sa.pub PEM): the key pair that signs service-account tokens."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS)
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return _key_pem(key), pub


def ca_cert_hash(cert_pem: bytes) -> str:
    """``sha256:<hex>`` of the certificate's Subject Public Key Info (what ``kubeadm join`` pins)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def generate_pki() -> dict[str, bytes]:
    """Every shared file, by its name below the PKI directory (``ca.crt``, ``etcd/ca.key``, ``sa.pub``, ...)."""
    out: dict[str, bytes] = {}
    for name, kind in facts.SHARED_PKI:
        if kind == "ca":
            out[f"{name}.crt"], out[f"{name}.key"] = make_ca(CA_NAMES[name])
        else:
            out[f"{name}.key"], out[f"{name}.pub"] = make_service_account_keys()
    return out
