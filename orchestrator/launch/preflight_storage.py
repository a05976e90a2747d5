"""Before anything is written or launched: can the runs folder's object store be used?

`check_runs_dir(where)` returns None for a local folder (the CLI checks it is writable as before)
and the `Location` of an object-store URI it could reach; otherwise `UserError` in one line naming
the URI and the reason: no credentials, an endpoint where nothing answers, a bucket that does not
exist, credentials the store refuses. It reads only (S3: one HeadBucket, no retries, a few seconds
at most), so nothing is written anywhere, and no message holds a credential: boto3's errors name
the endpoint and the operation, never the keys.
"""

from __future__ import annotations

import os

from orchestrator.spec.files import UserError
from orchestrator.storage.location import Location, is_remote

FLAG = "--runs-dir"


def check_runs_dir(where: str) -> Location | None:
    if not is_remote(where):
        return None
    loc = Location.parse(where)
    bucket = loc.path.split("/", 1)[0]
    if not bucket:
        raise UserError(f"{FLAG} {loc}: no bucket in the URI (expected e.g. s3://bucket/prefix)")
    if loc.uri.startswith("s3://"):
        _check_s3(loc, bucket)
    else:
        _check_pyarrow(loc, bucket)
    return loc


def _check_s3(loc: Location, bucket: str) -> None:
    import botocore.exceptions as bx

    from orchestrator.storage.remote import s3_client

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "the default AWS endpoint"
    try:
        import boto3

        if boto3.session.Session().get_credentials() is None:  # the standard chain found nothing
            raise bx.NoCredentialsError()
        s3_client(connect_timeout=3, read_timeout=5, attempts=1).head_bucket(Bucket=bucket)
    except bx.NoCredentialsError:
        raise UserError(
            f"{FLAG} {loc}: no S3 credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or use an instance role)"
        ) from None
    except (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError) as err:
        raise UserError(f"{FLAG} {loc}: the object store at {endpoint} does not answer ({type(err).__name__})") from None
    except bx.ClientError as err:
        status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        code = str(err.response.get("Error", {}).get("Code", ""))
        if status == 404 or code in ("404", "NoSuchBucket"):
            raise UserError(f"{FLAG} {loc}: bucket {bucket!r} does not exist at {endpoint}") from None
        if status in (401, 403):
            raise UserError(
                f"{FLAG} {loc}: the object store at {endpoint} refuses these credentials for bucket {bucket!r} (HTTP {status})"
            ) from None
        raise UserError(f"{FLAG} {loc}: the object store at {endpoint} answered HTTP {status} {code}") from None
    except (bx.BotoCoreError, ValueError) as err:  # a malformed endpoint URL, a broken profile
        raise UserError(f"{FLAG} {loc}: the object store cannot be used ({type(err).__name__}: {str(err)[:160]})") from None


def _check_pyarrow(loc: Location, bucket: str) -> None:
    from pyarrow import fs

    try:
        info = loc.fs.get_file_info(bucket)
    except Exception as err:  # pyarrow's errors for gs://, abfs://: OSError, ValueError, ArrowInvalid
        raise UserError(f"{FLAG} {loc}: the object store cannot be used ({type(err).__name__}: {str(err).strip()[:200]})") from None
    if info.type == fs.FileType.NotFound:
        raise UserError(f"{FLAG} {loc}: bucket {bucket!r} does not exist")
