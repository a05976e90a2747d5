"""S3 as gatesweep reaches it: the one reader of the S3 settings, the one client, the one
translation of S3's answers into typed errors, and the one check that a store can be used.

- `settings()`: endpoint (AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL), region (AWS_DEFAULT_REGION,
  else AWS_REGION; us-east-1 beside a custom endpoint), the keys `credentials_withheld` keeps out
  of the environment, and the timeouts (GATESWEEP_S3_CONNECT_TIMEOUT, GATESWEEP_S3_REQUEST_TIMEOUT).
  Credentials otherwise come from boto3's standard chain (variables, a profile, an instance role);
  beside a custom endpoint without AWS's own services, so a MinIO or moto on 127.0.0.1 never makes
  boto3 ask the instance-metadata address (169.254.169.254) or a container's for AWS credentials.
- `client()`: a boto3 client for those settings (one per settings, shared by threads), with no
  retries of its own: `storage.retry` is the one retry policy.
- `translate(err, what)`: botocore's errors as `FileNotFoundError`, `PermissionError`,
  `StoreUnreachable` or `NotAStore`, judged by their type, HTTP status and S3 error code.
- `problem(bucket, key)`: why the store cannot be used, in a few words, or None: one listing of the
  bucket (read only, no retries), which also proves the endpoint speaks S3 (an HTML page is refused).
- `credentials_withheld`: Ray Tune copies the driver's environment into every trial's runtime_env,
  which Ray writes to its logs in clear; inside this block the AWS keys are out of os.environ and
  only this process's own clients use them.

No message here holds a credential: botocore's errors name the endpoint and the operation only.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import os
from dataclasses import dataclass, field
from typing import Any

from .errors import NotAStore, StoreUnreachable

ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
REGION_ENV = ("AWS_DEFAULT_REGION", "AWS_REGION")
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
"""Ray Tune copies these from the driver's environment into every trial actor's runtime_env
(ray/tune/execution/class_cache.py), which Ray's runtime_env agent writes to its log in clear."""
PLAIN_ENV = (*ENDPOINT_ENV, *REGION_ENV, "AWS_CA_BUNDLE", "AWS_EC2_METADATA_DISABLED")
"""The S3 variables without a secret: what a cluster's nodes are given as they are."""
CHAIN_ENV = (*SECRET_ENV, "AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_EC2_METADATA_DISABLED", "AWS_CA_BUNDLE")
CONNECT_TIMEOUT_ENV, REQUEST_TIMEOUT_ENV = "GATESWEEP_S3_CONNECT_TIMEOUT", "GATESWEEP_S3_REQUEST_TIMEOUT"
NOT_FOUND = ("404", "NoSuchKey", "NoSuchBucket", "NotFound")
REFUSED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "AllAccessDisabled")
AWS_ONLY_PROVIDERS = ("iam-role", "container-role")
"""botocore's credential providers that ask AWS's own services over the network (EC2's instance
metadata, ECS's container endpoint): their credentials are AWS's, of no use to a custom endpoint."""
BUSY = ("SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling", "RequestTimeTooSkewed")

_withheld: dict[str, str] = {}


@dataclass(frozen=True)
class S3Settings:
    """Where and how to reach S3 (hashable: one client per distinct settings)."""

    endpoint: str | None = None
    """A custom endpoint URL (MinIO, moto, another cloud's S3 API); None: AWS's own."""
    region: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    connect_timeout: float = 5.0
    request_timeout: float = 60.0
    chain: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """The variables boto3's credential chain reads, as they were (a client is made again when they change)."""

    @property
    def where(self) -> str:
        """The endpoint as messages name it (never a credential)."""
        return self.endpoint or "the default AWS endpoint"


def _seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if 0 < value < 3600 else default


def settings() -> S3Settings:
    """The S3 settings of this process, read from its environment (the module's docstring)."""
    endpoint = next((os.environ[k] for k in ENDPOINT_ENV if os.environ.get(k)), None)
    region = next((os.environ[k] for k in REGION_ENV if os.environ.get(k)), None) or ("us-east-1" if endpoint else None)
    held = dict(_withheld)
    keys: dict[str, Any] = {}
    if held.get("AWS_ACCESS_KEY_ID") and held.get("AWS_SECRET_ACCESS_KEY"):
        keys = {
            "access_key": held["AWS_ACCESS_KEY_ID"],
            "secret_key": held["AWS_SECRET_ACCESS_KEY"],
            "session_token": held.get("AWS_SESSION_TOKEN") or held.get("AWS_SECURITY_TOKEN"),
        }
    return S3Settings(
        endpoint=endpoint,
        region=region,
        connect_timeout=_seconds(CONNECT_TIMEOUT_ENV, 5.0),
        request_timeout=_seconds(REQUEST_TIMEOUT_ENV, 60.0),
        chain=tuple((k, os.environ[k]) for k in CHAIN_ENV if k in os.environ),
        **keys,
    )


def client(s: S3Settings | None = None):
    """A boto3 S3 client for `s` (default: `settings()`), without retries of its own."""
    return _client(s or settings())


@functools.lru_cache(maxsize=16)
def _client(s: S3Settings):
    from botocore.config import Config

    config = Config(
        connect_timeout=s.connect_timeout,
        read_timeout=s.request_timeout,
        retries={"max_attempts": 1, "mode": "standard"},
        max_pool_connections=16,
    )
    keys = {"aws_access_key_id": s.access_key, "aws_secret_access_key": s.secret_key, "aws_session_token": s.session_token}
    session = _session(s.endpoint, **{k: v for k, v in keys.items() if v})
    return session.client("s3", endpoint_url=s.endpoint, region_name=s.region, config=config)


def _session(endpoint: str | None, **keys: str):
    """A boto3 session whose credential chain, beside a custom `endpoint`, leaves out the
    providers that ask AWS's own services (`AWS_ONLY_PROVIDERS`)."""
    import boto3
    import botocore.session

    core = botocore.session.Session()
    if endpoint:
        resolver = core.get_component("credential_provider")
        for name in AWS_ONLY_PROVIDERS:
            resolver.remove(name)
    return boto3.session.Session(botocore_session=core, **keys)


def has_credentials(s: S3Settings | None = None) -> bool:
    """Whether the withheld keys, or the credential chain a client for `s` (default: `settings()`)
    would use, give S3 credentials at all."""
    return bool(_withheld.get("AWS_ACCESS_KEY_ID")) or _session((s or settings()).endpoint).get_credentials() is not None


# ---- errors ---------------------------------------------------------------------------------------
def code(err: BaseException) -> str:
    response = getattr(err, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def status(err: BaseException) -> int:
    response = getattr(err, "response", None) or {}
    return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def _content_type(err: BaseException) -> str:
    response = getattr(err, "response", None) or {}
    return str(response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("content-type", ""))


def _not_s3(err: BaseException) -> bool:
    """An error answer without any error code: S3's own error answers carry one (XML), and
    botocore falls back to the bare status for a HEAD, which has no body; a body it cannot read
    as S3's (an HTML page) leaves the code empty."""
    return code(err) == "" and status(err) > 0


def precondition_failed(err: BaseException) -> bool:
    """A conditional write lost (If-None-Match / If-Match)."""
    return status(err) in (409, 412) or code(err) in ("PreconditionFailed", "ConditionalRequestConflict")


def translate(err: BaseException, what: str) -> BaseException:
    """botocore's `err` (raised doing `what`, e.g. 's3://b/k: reading') as a typed error; any
    other exception is returned as it is."""
    import botocore.exceptions as bx
    from botocore.parsers import ResponseParserError

    where = settings().where
    if isinstance(err, bx.ClientError):
        c, st = code(err), status(err)
        if _not_s3(err):
            kind = "an HTML page" if "html" in _content_type(err).lower() else "an answer that is not S3's"
            return NotAStore(f"{what}: the endpoint {where} answered HTTP {st} with {kind}, not as an S3 store")
        if c in NOT_FOUND or st == 404:
            return FileNotFoundError(errno.ENOENT, f"{what}: not found", what)
        if c in REFUSED or st in (401, 403):
            return PermissionError(errno.EACCES, f"{what}: the store at {where} refuses it (HTTP {st} {c})", what)
        if c in BUSY or st >= 500 or st == 429:
            return StoreUnreachable(f"{what}: the store at {where} answered HTTP {st} {c}")
        return OSError(errno.EIO, f"{what}: the store at {where} answered HTTP {st} {c}")
    if isinstance(err, ResponseParserError):
        return NotAStore(f"{what}: the endpoint {where} does not answer as an S3 store (its answer is not S3's XML)")
    if isinstance(err, bx.NoCredentialsError):
        return PermissionError(errno.EACCES, f"{what}: no S3 credentials", what)
    if isinstance(err, (bx.ConnectionError, bx.HTTPClientError, bx.IncompleteReadError)):
        return StoreUnreachable(f"{what}: the store at {where} does not answer ({type(err).__name__})")
    if isinstance(err, bx.BotoCoreError):
        return OSError(errno.EIO, f"{what}: {type(err).__name__}: {str(err)[:200]}")
    return err


# ---- is the store usable? -------------------------------------------------------------------------
def problem(bucket: str, key: str = "") -> str | None:
    """Why the S3 store cannot be used for `bucket/key`, in a few words, or None (the module's
    docstring). It reads only: one listing, a few seconds at most."""
    s = settings()
    fast = dataclasses.replace(s, connect_timeout=min(s.connect_timeout, 3.0), request_timeout=5.0)
    try:
        if not has_credentials(s):
            role = "" if s.endpoint else ", or use an instance role"  # an instance role's keys are AWS's own
            return f"no S3 credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE{role})"
        answer = client(fast).list_objects_v2(Bucket=bucket, Prefix=key.rstrip("/") + "/" if key else "", MaxKeys=1)
    except Exception as err:  # every way a store can fail (botocore's errors, a malformed endpoint URL), said
        return _said(err, bucket, s.where)
    if answer.get("Name") != bucket:
        return (
            f"the endpoint {s.where} does not answer as an S3 store (a listing of {bucket!r} came back without it); check AWS_ENDPOINT_URL"
        )
    return None


def _said(err: BaseException, bucket: str, where: str) -> str:
    """`problem`'s few words for the error of its listing. A listing's error answer from S3 is XML
    with an S3 code (NoSuchBucket, AccessDenied...); one without a code, or with only the HTTP
    status (botocore's fallback for a body it cannot read, and for a 200 whose body is not XML),
    comes from something that is not S3."""
    import botocore.exceptions as bx

    if isinstance(err, bx.ClientError) and (code(err) == "" or code(err).isdigit()):
        page = ", an HTML page" if "html" in _content_type(err).lower() else ""
        return f"the endpoint {where} does not answer as an S3 store (HTTP {status(err)}{page}); check AWS_ENDPOINT_URL"
    typed = translate(err, f"s3://{bucket}")
    if isinstance(typed, FileNotFoundError):
        return f"bucket {bucket!r} does not exist at {where}"
    if isinstance(typed, PermissionError):
        return f"the object store at {where} refuses these credentials for bucket {bucket!r} (HTTP {status(err)})"
    if isinstance(typed, StoreUnreachable) and status(err) == 0:
        return f"the object store at {where} does not answer ({type(err).__name__})"
    if isinstance(typed, NotAStore):
        return f"{typed}; check AWS_ENDPOINT_URL"
    if isinstance(typed, OSError):
        return str(typed).split(": ", 1)[-1]
    return f"the object store cannot be used ({type(err).__name__}: {str(err)[:160]})"


# ---- credentials kept out of Ray's runtime_env ------------------------------------------------------
def withheld_credentials() -> dict[str, str]:
    """The AWS keys `credentials_withheld` took out of the environment ({} outside it)."""
    return dict(_withheld)


class credentials_withheld:
    """`with credentials_withheld():` takes the AWS keys out of os.environ (so Ray Tune cannot put
    them into a runtime_env) while this process keeps using them for its own S3 calls; they are
    back in os.environ afterwards. Workers of a local Ray inherit them from the raylet, started
    before; nodes of a joined cluster take them from their own environment."""

    def __enter__(self) -> credentials_withheld:
        for key in SECRET_ENV:
            if key in os.environ:
                _withheld[key] = os.environ.pop(key)
        return self

    def __exit__(self, *exc: object) -> None:
        for key, value in _withheld.items():
            os.environ.setdefault(key, value)
        _withheld.clear()
