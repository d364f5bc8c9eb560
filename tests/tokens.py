"""Web identity tokens for tests: JWTs like a projected service account token.

Signed HS256 with a throwaway key made per token: nothing here verifies a
signature (moto does not; the stand-in's trust evaluator reads the claims), so
the key only makes the token look and parse like a real one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from pathlib import Path
from typing import Any

EKS_AUDIENCE = "sts.amazonaws.com"


def _segment(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def service_account_token(
    issuer: str,
    namespace: str,
    name: str,
    *,
    audience: str = EKS_AUDIENCE,
    lifetime: float = 3600.0,
    **claims: Any,
) -> str:
    """A token for ``system:serviceaccount:<namespace>:<name>`` from ``issuer``, as EKS projects it.

    Args:
        issuer: The OIDC issuer URL, such as https://oidc.eks.us-east-1.amazonaws.com/id/X.
        namespace: The service account's namespace.
        name: The service account's name.
        audience: The ``aud`` claim (EKS projects sts.amazonaws.com for IRSA).
        lifetime: Seconds from now to ``exp``; negative for an expired token.
        **claims: More claims, or replacements.
    """
    now = int(time.time())
    body = {
        "iss": issuer,
        "sub": f"system:serviceaccount:{namespace}:{name}",
        "aud": [audience],
        "iat": now,
        "nbf": now,
        "exp": int(now + lifetime),
        "jti": secrets.token_hex(8),
        **claims,
    }
    header = _segment(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _segment(json.dumps(body).encode())
    key = secrets.token_bytes(32)
    signature = hmac.new(key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{_segment(signature)}"


def write_token(path: Path, token: str) -> Path:
    """Write ``token`` where the kubelet would project it, readable by its owner only."""
    path.touch(mode=0o600)
    path.write_text(token)
    return path
