"""The option groups of the commands that run the engine on this machine: the engine's
parameters and tuning, inputs (JSON Lines, crawls), the index, outputs, `tune`.
Part of the option table (table.py)."""

from __future__ import annotations

from streamdedup.cli.options import Opt, OptionGroup
from streamdedup.config import ITEMS, MAX_DOC_BYTES, METRICS, EngineOptions

ENGINE = OptionGroup(
    "detection (stored in the index; an existing index keeps its own)",
    (
        Opt(
            "threshold",
            "Jaccard similarity at or above which a document is a duplicate (default 0.8)",
            float,
            metavar="T",
        ),
        Opt("num-perm", "MinHash signature length K (default 128)", int, metavar="K"),
        Opt("shingle", "shingling: word:K or char:K (default word:5)", str, metavar="SPEC"),
        Opt(
            "bands",
            "LSH bands b (with --rows; default: tuned from threshold and K)",
            int,
            metavar="B",
        ),
        Opt("rows", "LSH rows per band r (with --bands)", int, metavar="R"),
        Opt(
            "verify",
            "how candidates are confirmed (default exact)",
            str,
            choices=("exact", "signature"),
        ),
        Opt("seed", "hash seed (default 1)", int),
        Opt(
            "metric",
            "similarity family: jaccard (texts), hamming (bit strings), cosine or "
            "euclidean (vectors) (default jaccard)",
            str,
            choices=METRICS,
        ),
        Opt(
            "item",
            "what a record is compared by: text or set (jaccard), bits (hamming), vector "
            "(cosine, euclidean) (default: the metric's first)",
            str,
            choices=ITEMS,
        ),
        Opt("bits", "length N of a bits item, a multiple of 8 (hamming)", int, metavar="N"),
        Opt("dim", "dimension D of a vector item (cosine, euclidean)", int, metavar="D"),
        Opt(
            "max-distance",
            "hamming: the largest distance in bits that is a duplicate (default 5%% of N; "
            "or --threshold as 1 - d/N); euclidean: the largest L2 distance (required)",
            float,
            metavar="D",
        ),
        Opt(
            "bucket-width",
            "euclidean: the width w of a projection's buckets (default 4 x --max-distance)",
            float,
            metavar="W",
        ),
        Opt("fp-weight", "weight of false-positive area when tuning bands/rows", float, 0.02),
        Opt("fn-weight", "weight of false-negative area when tuning bands/rows", float, 0.98),
    ),
)
TUNING = OptionGroup(
    "engine",
    (
        Opt(
            "max-bucket-candidates",
            "candidates read from one LSH bucket, its newest (a bound on pathological "
            "'hot' buckets; boilerplate-heavy sites stay well under it)",
            int,
            EngineOptions.max_bucket_candidates,
            metavar="N",
        ),
        Opt(
            "max-exact-checks",
            "exact comparisons per document at most (a bound on pathological input)",
            int,
            EngineOptions.max_exact_checks,
            metavar="N",
        ),
        Opt(
            "batch-size", "documents per batch (one index transaction each)", int, 8000, metavar="N"
        ),
        Opt(
            "durability",
            "process: a committed batch survives the process being killed, the OS "
            "writes it to disk shortly after; full: fsync every commit (survives power "
            "loss, slower)",
            str,
            "process",
            choices=("process", "full"),
        ),
        Opt(
            "workers",
            "extra processes that decode and compute signatures (WARC input: extract "
            "pages) while the main process updates the index (0: all in the main "
            "process; 1 suits 2 cores)",
            int,
            0,
            metavar="N",
        ),
    ),
)
# the engine options that apply to the Kafka commands (batches come from the polls)
STREAM_ENGINE = OptionGroup(
    "engine",
    tuple(
        o
        for o in TUNING.options
        if o.name in ("max-bucket-candidates", "max-exact-checks", "durability")
    ),
)
INPUT = OptionGroup(
    "input",
    (
        Opt("id-field", "field holding the document id", str, "id", metavar="NAME"),
        Opt("text-field", "field holding the document text", str, "text", metavar="NAME"),
        Opt(
            "item-field",
            "field holding the item of an index of sets, bits or vectors "
            "(default: the item's name)",
            str,
            metavar="NAME",
        ),
        Opt("max-doc-bytes", "larger input records are rejected", int, MAX_DOC_BYTES, metavar="N"),
    ),
)
# Crawler input (`inputs.html`, `inputs.warc`): what the text of an HTML page is.
EXTRACT = Opt(
    "extract",
    "text of an HTML page that is shingled: main (the main content: navigation, "
    "headers, footers, cookie banners dropped) or all (every visible text)",
    str,
    "main",
    choices=("main", "all"),
)
CRAWL_FILES = OptionGroup(
    "crawler input",
    (
        Opt(
            "text-format",
            "what the JSON text field holds: text, or html (its text is extracted)",
            str,
            "text",
            choices=("text", "html"),
        ),
        EXTRACT,
        Opt(
            "warc-id",
            "id of a page read from a WARC archive (.warc, .warc.gz): its "
            "WARC-Target-URI or its WARC-Record-ID",
            str,
            "uri",
            choices=("uri", "record-id"),
        ),
        Opt(
            "warc-status",
            "which HTTP responses of a WARC archive are pages to check: 2xx (successful "
            "ones; the others are skipped, counted as not_2xx) or any",
            str,
            "2xx",
            choices=("2xx", "any"),
        ),
        Opt(
            "report-skipped",
            "list on stderr every WARC record skipped (not a response, not HTML, not 2xx)",
            flag=True,
        ),
    ),
)
CRAWL_STREAM = OptionGroup(
    "crawler input (--input-format html)",
    (
        EXTRACT,
        Opt(
            "id-header",
            "take an HTML message's id from this header instead of its key",
            str,
            metavar="NAME",
        ),
    ),
)
INDEX = OptionGroup("index", (Opt("index", "index directory", str, metavar="DIR"),))
OUTPUT = OptionGroup(
    "output",
    (
        Opt("output", "verdicts, JSON Lines ('-' for stdout)", str, "-", metavar="OUT"),
        Opt(
            "keep",
            "also write the input lines of the unique documents here, as read and in input "
            "order: the de-duplicated corpus ('-' for stdout when --output is a file)",
            str,
            metavar="FILE",
        ),
        Opt(
            "keep-per-cluster",
            "--keep: the first document of each cluster in the input instead, also of a "
            "cluster an earlier run started (one line a cluster, none left out)",
            flag=True,
        ),
        Opt("progress", "progress bar on stderr", str, "auto", choices=("auto", "always", "never")),
        Opt(
            "dry-run",
            "check each document against the index as it is, inserting none (an existing "
            "index; the documents of the input are not checked against each other)",
            flag=True,
        ),
    ),
)
TUNE = OptionGroup(
    "tune",
    (
        Opt("threshold", "target Jaccard threshold (default 0.8)", float, metavar="T"),
        Opt("num-perm", "signature length K (default 128)", int, metavar="K"),
        Opt(
            "metric",
            "the family whose curve to draw: jaccard, hamming, cosine, euclidean or "
            "containment (default jaccard)",
            str,
            "jaccard",
            choices=METRICS,
        ),
        Opt(
            "sample",
            "measure your own data instead: how many duplicates each threshold would call "
            "among the first documents of this JSON Lines file, with example pairs near each",
            str,
            metavar="FILE",
        ),
        Opt("sample-size", "--sample: documents read", int, 5000, metavar="N"),
        Opt(
            "plot",
            "--sample: also draw the duplicates per threshold to this PNG",
            str,
            metavar="PNG",
        ),
        Opt(
            "item",
            "--sample: the items, text or set (as the index will have)",
            str,
            "text",
            choices=("text", "set"),
        ),
        Opt(
            "shingle",
            "--sample: shingling of texts, word:K or char:K (default word:5)",
            str,
            metavar="SPEC",
        ),
        Opt("bits", "hamming: the length N of the bit strings", int, metavar="N"),
        Opt(
            "max-distance",
            "hamming: the largest distance in bits that is a duplicate (default 5%% of N); "
            "euclidean: the largest L2 distance",
            float,
            metavar="D",
        ),
        Opt(
            "bucket-width",
            "euclidean: the width of a projection's buckets (default 4 x --max-distance)",
            float,
            metavar="W",
        ),
        Opt("bands", "evaluate this b instead of tuning (with --rows)", int, metavar="B"),
        Opt("rows", "evaluate this r instead of tuning (with --bands)", int, metavar="R"),
        Opt("fp-weight", "weight of the false-positive area", float, 0.02),
        Opt("fn-weight", "weight of the false-negative area", float, 0.98),
    ),
)
FORMAT = OptionGroup("format", (Opt("json", "print JSON instead of text", flag=True),))
