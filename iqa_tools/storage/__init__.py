"""Read an image's bytes from wherever it is: a local path, object storage, or HTTPS.

Workers on other hosts share no disk with the submitter, so an image is named by a location
that any host can read: ``s3://`` (also MinIO, Ceph), ``gs://``, ``az://``, ``https://`` through
fsspec and its maintained backends, or ``file://`` and plain paths, read directly (no fsspec on
the local path).  Where each thing happens:

* :mod:`.locations`: a location as text: its scheme, how a message shows it (a query string,
  a presigned URL's signature, is shown as ``?***``), and :func:`join_under`, which confines a
  manifest's relative names to a root by the same lexical rule as
  ``agentic_iqa.jobs.paths.confined_key`` (mirrored: this layer cannot import that one).
* :mod:`.access`: the gate.  Every :func:`stat`, :func:`read`, :func:`fetch` and
  :func:`upload`, and every redirect an HTTP server answers, first passes the reading in force;
  a location it refuses is a :class:`~iqa_tools.errors.LocationRefused`, and no request is sent.
* :mod:`.retry`: throttling and timeouts retried with exponential backoff and jitter, every
  other failure typed (:mod:`iqa_tools.errors`: ``ObjectMissing`` and ``StorageUnavailable``
  fail one item, ``StorageAccessDenied`` and ``StorageMisconfigured`` stop the job); one
  object's reads end within ``AGENTIC_IQA_STORAGE_DEADLINE`` and read at most
  ``AGENTIC_IQA_MAX_OBJECT_BYTES``.
* :mod:`.reads`: :func:`stat` and :func:`read`, through the local disk, fsspec's filesystems,
  S3's GET and :mod:`.web` (HTTP, one request each, connections only to allowed addresses).
* :mod:`.fetch`: :func:`fetch`, the bytes with their ``sha256:`` digest, checked against the
  digest recorded at submit and served from the local :class:`ObjectCache` (:mod:`.cache`)
  where it holds the current version.
* :mod:`.outputs`: :func:`upload`, and :func:`output_file` / :func:`output_folder`, which put a
  report or an export where the user asked, local or remote.

Credentials and endpoints come only from each backend's usual environment and config files
(``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, ``~/.aws/config``, ``GOOGLE_APPLICATION_CREDENTIALS``,
``AZURE_STORAGE_*``); a URL that carries ``user:password@`` is refused, so no location, and
therefore no message, ever holds one.

Environment (read when used): ``AGENTIC_IQA_STORAGE_ATTEMPTS`` (5), ``AGENTIC_IQA_STORAGE_BACKOFF``
(0.2 s, the first wait), ``AGENTIC_IQA_STORAGE_BACKOFF_MAX`` (10 s), ``AGENTIC_IQA_STORAGE_TIMEOUT``
(60 s per request), ``AGENTIC_IQA_STORAGE_DEADLINE`` (120 s per object, all attempts),
``AGENTIC_IQA_MAX_OBJECT_BYTES`` (256MiB), ``AGENTIC_IQA_OBJECT_CACHE`` (a folder) and
``AGENTIC_IQA_OBJECT_CACHE_BYTES`` (2GB).
"""

from __future__ import annotations

from .access import AccessPolicy, Reading, reading
from .cache import ObjectCache
from .fetch import fetch, sha256_digest
from .locations import REMOTE_SCHEMES, display, is_url, join_under, scheme
from .outputs import output_file, output_folder, upload
from .reads import ObjectStat, forget_filesystems, read, stat
from .retry import RetryPolicy

__all__ = [
    "REMOTE_SCHEMES",
    "AccessPolicy",
    "ObjectCache",
    "ObjectStat",
    "Reading",
    "RetryPolicy",
    "display",
    "fetch",
    "forget_filesystems",
    "is_url",
    "join_under",
    "output_file",
    "output_folder",
    "read",
    "reading",
    "scheme",
    "sha256_digest",
    "stat",
    "upload",
]
