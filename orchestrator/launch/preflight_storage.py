"""Before anything is written or launched: can the runs folder's object store be used?

`check_runs_dir(where)` returns None for a local folder (the CLI checks it is writable as before)
and the `Location` of an object-store URI it could reach; otherwise `UserError` in one line naming
the URI and the reason: no credentials, an endpoint where nothing answers, a bucket that does not
exist, credentials the store refuses (`orchestrator.storage.remote.store_problem`, which reads
only: nothing is written anywhere, and no message holds a credential).
"""

from __future__ import annotations

from orchestrator.spec.files import UserError
from orchestrator.storage.location import Location, is_remote
from orchestrator.storage.remote import store_problem

FLAG = "--runs-dir"


def check_runs_dir(where: str) -> Location | None:
    if not is_remote(where):
        return None
    loc = Location.parse(where)
    problem = store_problem(loc)
    if problem:
        raise UserError(f"{FLAG} {loc}: {problem}")
    return loc
