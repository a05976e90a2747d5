"""Before anything is written or launched: the runs folder, parsed once at the edge.

`runs_location(where)` is the one place a `--runs-dir` text becomes a `Location`, which the
launch, the trial payloads and the checkpoints then carry: a local folder (not created here:
the CLI checks it is writable after the other checks), or an object-store URI whose store could
be reached. Otherwise `UserError` in one line naming the flag, the text and the reason: a text
that looks like a URI but is none a store backs (`s3:/b/p`, `s3a://b/p`, `s3:b/p`, `gcs:/b`,
`scheme:rest`: never created as a local folder), no credentials, an endpoint where nothing
answers or that does not answer as S3 (an HTML page), a bucket that does not exist, credentials
the store refuses (`orchestrator.storage.usable.problem`, which reads only: nothing is written
anywhere, and no message holds a credential).
"""

from __future__ import annotations

from orchestrator.core.errors import UserError
from orchestrator.storage import BadLocation, Location
from orchestrator.storage.usable import problem

FLAG = "--runs-dir"


def runs_location(where: str, flag: str = FLAG) -> Location:
    """The runs folder `where` as a Location (the module's docstring); UserError naming `flag`."""
    try:
        loc = Location.parse(where)
    except BadLocation as err:
        raise UserError(f"{flag} {err}") from None
    found = problem(loc)
    if found:
        raise UserError(f"{flag} {loc}: {found}")
    return loc
