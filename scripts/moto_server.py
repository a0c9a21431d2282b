"""The moto server (pinned in requirements/emulator.txt) with AWS's transaction semantics and
bounded memory.

Eight changes to moto, each installed by a function (or class) below and each written so that it could be
offered upstream as it stands:

1. `install_transaction_undo_log`: a cancelled TransactWriteItems is undone key by key.
   moto (moto/dynamodb/models/__init__.py, `transact_write_items`) takes a deep copy of every
   table a transaction touches when the transaction starts, and on cancellation puts the copies
   back in place of the tables. That costs time and memory proportional to the size of the
   tables on every transaction (quadratic over a run: 16.7 GB of emulator memory after 1,000
   orders of the project's demo), replaces the table object (with its stream shard, so open
   shard iterators go on reading the old shard), and, under the threaded server, loses any
   write another request committed in between. Instead, the stored item (or its absence) of
   every key the transaction writes is recorded before it runs, the table copies are skipped,
   and when the transaction fails those keys alone are put back in the live table, without
   stream records. moto writes a cancelled transaction's items, stream records included, before
   it notices the cancellation: those records are taken back out of the shard. On AWS a
   cancelled transaction writes nothing and never reaches the stream.

2. `SerialiseDynamoDB`: one DynamoDB / DynamoDB Streams request at a time. A transaction is
   applied item by item; serialising makes it isolated (as on AWS), and makes the undo above
   safe. Every other service (SQS long polls in particular) stays concurrent.

3. `install_weak_instance_tracking`: moto's `BaseModel` appends every model object it ever
   creates to its class's `instances_tracked` list, for the `/moto-api/` dashboard. Nothing
   removes them, so every item version, stream record, shard iterator and SQS message ever
   created stays in memory. The lists are replaced by registries holding weak references: the
   dashboard (and S3's reset, the only other reader) still see every object that is alive,
   and the rest is freed.

4. `install_ttl_deletion_marking`: moto never deletes expired items (DynamoDB's TTL process
   does). The local runtime's fault injection (local/src/faults/ttl.rs) deletes them itself
   with DeleteItem and the header `X-Outbox-Local-Ttl-Delete: 1`; the `REMOVE` stream record of
   such a deletion carries `userIdentity` {"type": "Service", "principalId":
   "dynamodb.amazonaws.com"}, as AWS marks TTL deletions
   (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/time-to-live-ttl-streams.html).

5. `install_uncounted_sqs_send_and_receive`: moto's `Queue.attributes` property computes
   every attribute, the three `ApproximateNumberOfMessages*` counts included, each a pass over
   every message of the queue; `SQSBackend.send_message` reads it once per message (for
   `ContentBasedDeduplication`) and `receive_message` three times per message received (for
   `MessageRetentionPeriod`, through `get_queue_attributes`) (moto/sqs/models.py). A send or a
   receive on a queue holding N messages costs O(N), so filling a queue, or reading it back, is
   quadratic: EventBridge delivers to SQS inside `PutEvents`, and with 2,000 messages waiting
   in a rule's target queue one `PutEvents` of 10 entries took 1.2-1.5 s on the shared 2-core
   machine, 57 % of the emulator's CPU in those counts. While a send or a receive runs (in its
   request's thread), the counts answer 0 without the pass: neither reads them, and
   `GetQueueAttributes` (another request) still counts. The upstream fix is for both to read
   the attribute they need (`queue.content_based_deduplication`,
   `queue.message_retention_period`) directly.

6. `install_jsonpath_cache`: EventBridge delivery to each target renders the target's input
   (moto/events/utils.py, `EventTemplateParser.parse`) with `jsonpath_ng.ext.parse` on every
   path of the input map, once per event and target, and each `parse` builds a new parser (its
   yacc tables included): 22 % of the emulator's CPU with two targets per event. Parsed paths
   are kept by their text (a bounded cache; a parsed path is not changed by `find`), as a
   module-level parser would in moto.

7. `KeepAliveRequestHandler`: HTTP/1.1 keep-alive connections, as AWS's endpoints keep them.
   werkzeug's development server (which `moto_server` runs) answers every request with
   `Connection: close`, so every SDK call pays a new TCP connection (a quarter of a Rust
   function's CPU per call, docs/cost.md, "The functions' cost, measured"). Dropping that header alone
   hangs the connection's second request: after each response werkzeug drains "any remaining
   data in the read socket" with `rfile.read(10_000_000)` (werkzeug/serving.py, `run_wsgi`),
   which on a kept-alive connection swallows the next request line and blocks until 10 MB or
   EOF arrive (py-spy: the thread waits in `SocketIO.readinto` under that `execute`). The
   handler reads exactly the request's body (its Content-Length, or its chunks) and answers
   with a Content-Length, so the next request starts where this one ended.

8. `install_archive_replay`: StartReplay replays what AWS replays. moto archives the events a
   bus receives (its `Events-Archive-<name>` rule, as AWS's managed rule, skips replayed
   events), but its `Replay.replay_events` (moto/events/models.py) sends EVERY archived event to
   EVERY rule of the bus: it ignores the replay's time window (`EventStartTime`,
   `EventEndTime`: "Only events that occurred between the EventStartTime and EventEndTime are
   replayed", by "the time in the event"), its rules (`Destination.FilterArns`: "the rules to
   replay events to"), and the archive's retention, and `DescribeReplay` has no
   `EventLastReplayedTime`. Here a replay sends the archived events whose `time` lies in
   [EventStartTime, EventEndTime] (and, with a retention, not older than it), oldest first, to
   the rules of `FilterArns` (all rules of the bus without it), each with a new `id` and
   `replay-name`, and records the time of the last one replayed. As in moto, it runs inside
   `StartReplay` (complete when the call returns). Sources:
   https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_StartReplay.html,
   https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_ReplayDestination.html,
   https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-replay-archived-event.html.

Usage: python scripts/moto_server.py -H 127.0.0.1 -p PORT
"""

import argparse
import copy
import itertools
import threading
import weakref

from werkzeug.exceptions import InternalServerError
from werkzeug.serving import run_simple
from werkzeug.wsgi import LimitedStream
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)

_DYNAMODB_LOCK = threading.Lock()


class TransactionUndoLog:
    """What a TransactWriteItems call can change, recorded before it runs, and its undo.

    For every (table, key) that a Put, Update or Delete of the transaction names, the stored
    item is kept as a deep copy of that one item (an Update changes the stored item in place),
    or as absent. For every table with a stream, the shard's length is kept. `restore` puts
    exactly those items back in the live table (directly in `Table.items`, so no stream record
    is produced) and takes the records written since out of the shards. Secondary indexes need
    nothing: moto computes them from `Table.items` on each query.
    """

    def __init__(self):
        # (id(table), hash key, range key) -> (table, stored item or None, hash key was present)
        self._items = {}
        self._shards = []  # (shard, its list of records, its length)
        # False when a written key could not be resolved (a malformed request, which moto
        # cancels): the tables are then left to moto's own rollback (its table copies).
        self.covers_every_write = True

    @classmethod
    def capture(cls, backend, transact_items):
        """The undo log of `transact_items`."""
        from moto.dynamodb.models.dynamo_type import DynamoType

        log = cls()
        for transact_item in transact_items:
            op_type, op = next(iter(transact_item.items()))
            try:
                table = backend.get_table(op["TableName"])
            except Exception:
                continue  # moto cancels the transaction: an unknown table is not written
            log._remember_shard(table)
            if op_type == "ConditionCheck":
                continue
            try:
                key = op["Item"] if op_type == "Put" else op["Key"]
                hash_key = DynamoType(key[table.hash_key_attr])
                range_key = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
                log._remember_item(table, hash_key, range_key)
            except Exception:
                log.covers_every_write = False
        return log

    def _remember_shard(self, table):
        shard = table.stream_shard
        if shard is not None and all(shard is not s for s, _, _ in self._shards):
            self._shards.append((shard, shard.items, len(shard.items)))

    def _remember_item(self, table, hash_key, range_key):
        entry = (id(table), hash_key, range_key)
        if entry in self._items:
            return
        if range_key is None:
            stored = table.items.get(hash_key)
        else:
            stored = table.items.get(hash_key, {}).get(range_key)
        saved = copy.deepcopy(stored) if stored is not None else None
        self._items[entry] = (table, saved, hash_key in table.items)

    def restore(self):
        """Puts the recorded items back (if they cover every write) and removes the stream
        records written since."""
        for shard, records, length in self._shards:
            if shard.items is records:  # (moto's own Lambda mappings may start a new list)
                del records[length:]
        if not self.covers_every_write:
            return
        for (_, hash_key, range_key), (table, saved, hash_was_present) in self._items.items():
            if range_key is None:
                if saved is None:
                    table.items.pop(hash_key, None)
                else:
                    table.items[hash_key] = saved
                continue
            by_range = table.items[hash_key]
            if saved is None:
                by_range.pop(range_key, None)
            else:
                by_range[range_key] = saved
            if not by_range and not hash_was_present:
                del table.items[hash_key]


class _SkipTableDeepCopies:
    """Stands for the `copy` module inside `moto.dynamodb.models` while a transaction runs with
    an undo log: `deepcopy` of a Table returns the table itself (so moto's rollback, which puts
    that "copy" back, leaves the live table in place); everything else is the real `copy`."""

    def __init__(self, active):
        self._active = active

    def deepcopy(self, x, memo=None):
        from moto.dynamodb.models.table import Table

        if isinstance(x, Table) and getattr(self._active, "value", False):
            return x
        return copy.deepcopy(x, memo)

    def __getattr__(self, name):
        return getattr(copy, name)


def install_transaction_undo_log():
    """Wraps moto's TransactWriteItems with a TransactionUndoLog (see the module's docstring)."""
    import moto.dynamodb.models as models

    active = threading.local()
    models.copy = _SkipTableDeepCopies(active)
    original = models.DynamoDBBackend.transact_write_items

    def transact_write_items(self, transact_items):
        undo = TransactionUndoLog.capture(self, transact_items)
        active.value = undo.covers_every_write
        try:
            return original(self, transact_items)
        except Exception:
            undo.restore()
            raise
        finally:
            active.value = False

    models.DynamoDBBackend.transact_write_items = transact_write_items


class _LiveInstances:
    """A model class's `instances_tracked`: the instances that are still alive, oldest first.

    Instances are held by weak reference (a WeakValueDictionary under increasing numbers, as
    moto's models need not be hashable); one that cannot be weakly referenced is kept."""

    def __init__(self, instances=()):
        self._numbers = itertools.count()
        self._weak = weakref.WeakValueDictionary()
        self._strong = {}
        for instance in instances:
            self.append(instance)

    def append(self, instance):
        number = next(self._numbers)
        try:
            self._weak[number] = instance
        except TypeError:
            self._strong[number] = instance

    def _alive(self):
        items = list(self._weak.items()) + list(self._strong.items())
        return [instance for _, instance in sorted(items, key=lambda item: item[0])]

    def __iter__(self):
        return iter(self._alive())

    def __len__(self):
        return len(self._weak) + len(self._strong)


def install_weak_instance_tracking():
    """Makes every model class's `instances_tracked` a `_LiveInstances` (see the docstring)."""
    from moto.core.common_models import BaseModel

    def __new__(cls, *args, **kwargs):
        instance = super(BaseModel, cls).__new__(cls)
        tracked = cls.__dict__.get("instances_tracked")
        if not isinstance(tracked, _LiveInstances):
            # Set by moto's metaclass (and by moto's reset) as a list.
            tracked = _LiveInstances(tracked or ())
            cls.instances_tracked = tracked
        tracked.append(instance)
        return instance

    BaseModel.__new__ = __new__


_TTL_DELETE = threading.local()


def install_ttl_deletion_marking():
    from moto.dynamodb.models.table import StreamRecord

    original = StreamRecord.__init__

    def __init__(self, table, stream_type, event_name, old, new, seq):
        original(self, table, stream_type, event_name, old, new, seq)
        if event_name == "REMOVE" and getattr(_TTL_DELETE, "active", False):
            # The DynamoDB Streams API's shape (Lambda's event spells it type/principalId).
            self.record["userIdentity"] = {"Type": "Service", "PrincipalId": "dynamodb.amazonaws.com"}

    StreamRecord.__init__ = __init__


_UNCOUNTED = threading.local()


def install_uncounted_sqs_send_and_receive():
    """While `SQSBackend.send_message` or `receive_message` runs in a thread, the queue's
    message counts answer 0 there instead of passing over every message (see the docstring)."""
    from moto.sqs.models import Queue, SQSBackend

    for name in (
        "approximate_number_of_messages",
        "approximate_number_of_messages_delayed",
        "approximate_number_of_messages_not_visible",
    ):
        counted = getattr(Queue, name).fget

        def count(self, counted=counted):
            return 0 if getattr(_UNCOUNTED, "active", False) else counted(self)

        setattr(Queue, name, property(count))

    for name in ("send_message", "receive_message"):
        original = getattr(SQSBackend, name)

        def uncounted(self, *args, original=original, **kwargs):
            _UNCOUNTED.active = True
            try:
                return original(self, *args, **kwargs)
            finally:
                _UNCOUNTED.active = False

        setattr(SQSBackend, name, uncounted)


def install_jsonpath_cache():
    """`jsonpath_ng.ext.parse` keeps what it parsed by the path's text (see the docstring)."""
    import functools

    import jsonpath_ng.ext

    jsonpath_ng.ext.parse = functools.lru_cache(maxsize=1024)(jsonpath_ng.ext.parse)


def install_archive_replay():
    """StartReplay honours its window, its rules and the archive's retention (see the docstring)."""
    import time
    import uuid

    import moto.events.models as models

    def replay_events(self, archive):
        backend = models.events_backends[self.account_id][self.region]
        bus = backend.describe_event_bus(self.destination["Arn"].split("/")[-1])
        filter_arns = set(self.destination.get("FilterArns") or [])
        rules = [rule for rule in bus.rules.values() if not filter_arns or rule.arn in filter_arns]
        start, end = float(self.event_start_time), float(self.event_end_time)
        retention_days = int(archive.retention or 0)
        if retention_days > 0:
            start = max(start, time.time() - retention_days * 86400)
        last = None
        for event in sorted(archive.events, key=lambda e: float(e["time"])):
            at = float(event["time"])
            if not start <= at <= end:
                continue
            replayed = dict(event, id=str(uuid.uuid4()), **{"replay-name": self.name})
            replayed.pop("ingestion-time", None)  # moto's own field, not part of an event
            for rule in rules:
                rule.send_to_targets(replayed, transform_input=False)
            last = at
        self.event_last_replayed_time = last
        self.state = models.ReplayState.COMPLETED
        self.end_time = models.unix_time()

    original_describe_short = models.Replay.describe_short

    def describe_short(self):
        described = original_describe_short(self)
        last = getattr(self, "event_last_replayed_time", None)
        if last is not None:
            described["EventLastReplayedTime"] = last
        return described

    models.Replay.replay_events = replay_events
    models.Replay.describe_short = describe_short


class QuietRequestHandler(MotoRequestHandler):
    """moto's request handler without werkzeug's line per request: the local runtime discards
    the server's output, and formatting and writing a log line for every request took ~10 % of
    the emulator's CPU under load."""

    def log_request(self, code="-", size="-"):
        pass


class SerialiseDynamoDB:
    """WSGI middleware: one DynamoDB / DynamoDB Streams request at a time."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target.startswith("DynamoDB_") or target.startswith("DynamoDBStreams_"):
            with _DYNAMODB_LOCK:
                _TTL_DELETE.active = environ.get("HTTP_X_OUTBOX_LOCAL_TTL_DELETE") == "1"
                try:
                    # Materialise the body inside the lock: moto computes it lazily.
                    return list(self.app(environ, start_response))
                finally:
                    _TTL_DELETE.active = False
        return self.app(environ, start_response)


class KeepAliveRequestHandler(QuietRequestHandler):
    """moto's request handler on HTTP/1.1 keep-alive connections (see the module's docstring).

    A connection closes when the client asks (`Connection: close`, or an HTTP/1.0 request
    without keep-alive: `http.server` decides), when a request's body cannot be delimited, or
    after an error. One thread per open connection, as before per request (`threaded=True`);
    an idle connection's thread waits for its next request line and holds no lock.
    """

    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: the headers and the body are two writes; with Nagle's algorithm the body
    # waits for the client's (delayed, ~40 ms) ACK of the headers on a connection that stays
    # open. A closing connection flushed it at once, which is why the old server never waited.
    disable_nagle_algorithm = True

    def run_wsgi(self):
        if self.headers.get("Expect", "").lower().strip(" \t") == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self.environ = environ = self.make_environ()
        if environ.get("wsgi.input_terminated"):
            body = environ["wsgi.input"]  # chunked: werkzeug's DechunkedInput ends at the last chunk
        else:
            try:
                length = int(environ.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = -1
            if length < 0:
                self.close_connection = True  # the body's end is unknown: this connection ends with it
                length = 0
            body = environ["wsgi.input"] = LimitedStream(self.rfile, length)
        try:
            status, headers, chunks = self._call(self.server.app, environ)
        except Exception:  # noqa: BLE001 -- werkzeug's answer to an application error
            import traceback

            self.server.log("error", "Error on request:\n%s", traceback.format_exc())
            self.close_connection = True
            status, headers, chunks = self._call(InternalServerError(), environ)
        # What the application left unread of this request's body, so that the next request
        # starts at its request line.
        while body.read(65536):
            pass
        self._send(status, headers, b"".join(chunks))

    @staticmethod
    def _call(app, environ):
        """Runs the WSGI `app`; its status, headers and body chunks."""
        started = {}
        chunks = []

        def start_response(status, headers, exc_info=None):
            # Nothing is sent before the application returns, so a second call (with exc_info,
            # PEP 3333) simply replaces the first.
            started["status"], started["headers"] = status, headers
            return chunks.append  # WSGI's legacy write()

        application_iter = app(environ, start_response)
        try:
            chunks.extend(application_iter)
        finally:
            if hasattr(application_iter, "close"):
                application_iter.close()
        return started["status"], started["headers"], chunks

    def _send(self, status, headers, data):
        code_str, _, message = status.partition(" ")
        code = int(code_str)
        self.send_response(code, message)
        names = set()
        for name, value in headers:
            if name.lower() == "transfer-encoding":
                continue  # a hop-by-hop header (PEP 3333): the body is sent whole, with its length
            self.send_header(name, value)
            names.add(name.lower())
        bodiless = self.command == "HEAD" or 100 <= code < 200 or code in (204, 304)
        if not bodiless and "content-length" not in names:
            self.send_header("Content-Length", str(len(data)))
        if self.close_connection and "connection" not in names:
            self.send_header("Connection", "close")  # so the client does not reuse it
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)
        self.wfile.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args()
    import os

    os.environ.setdefault("MOTO_PORT", str(args.port))
    install_weak_instance_tracking()
    install_transaction_undo_log()
    install_ttl_deletion_marking()
    install_uncounted_sqs_send_and_receive()
    install_jsonpath_cache()
    install_archive_replay()
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        args.host,
        args.port,
        SerialiseDynamoDB(app),
        threaded=True,
        request_handler=KeepAliveRequestHandler,
    )


if __name__ == "__main__":
    main()
