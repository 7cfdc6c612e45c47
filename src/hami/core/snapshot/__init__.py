"""Scheduling snapshots: what HAMi's scheduling depended on over a window, as versioned JSON.

``hami-doctor snapshot`` writes one (from the API server or from Prometheus history) and
``hami-tune simulate`` replays it. The format is documented in ``docs/design/snapshot.md``; this
package is its only reader and writer: ``model`` holds the dataclasses and ``SnapshotError``,
``writer`` writes them and ``reader`` reads them. ``reader.load_snapshot`` checks every field and
raises ``SnapshotError`` whose text names the field (``pods[3].created: ...``), so a bad file is one
clear line, never a traceback.

Times are Unix seconds in memory and RFC 3339 in the file. Annotation values are kept verbatim, so
the replay decodes them with the same codecs as the scheduler.
"""
