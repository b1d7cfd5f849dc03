"""`python -m imageloader summary ARCHIVE...`: classes, counts, sizes and bad members of archives.

Reads each archive once as a stream, like the loader. With `--decode` every image is also
decoded, so undecodable members are listed by name before a training run meets them.
`python -m imageloader.summary ...` runs the same command.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

import numpy as np

from .decode import ALLOWED_FORMATS, Augment, Decoder
from .errors import REPACK_HINTS, UNWARNED_SKIPS, ArchiveError, Limits, SampleError
from .read import expand_sources, iter_members, split_folder
from .vocab import ClassPlaces, nested_classes_message, shared_names_message


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("archives", nargs="+", help="paths or globs of .tgz/.tar archives")
    parser.add_argument("--decode", action="store_true", help="decode every image too")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--max-listed", type=int, default=20,
                        help="members not read listed, by name")
    return parser


def summarize(archive: str, decode: bool = False, max_listed: int = 20) -> dict:
    """Images per class, mean bytes, skips by reason, and the first members not read (folder
    entries aside) by name, with why (`bad_members`). With `decode`, an image that does not
    decode is counted as skipped only, not as an image."""
    skipped: Counter = Counter()
    per_class: Counter = Counter()
    per_split: Counter = Counter()
    places = ClassPlaces()
    sizes: list[int] = []
    bad: list[tuple[str, str]] = []
    decoder = Decoder(Augment.make(8, False), limits=Limits(), formats=ALLOWED_FORMATS)
    scratch = np.empty(decoder.out_shape, np.uint8)

    def note(name: str, reason: str) -> None:  # a member the reader skips, folders aside
        if reason not in UNWARNED_SKIPS and len(bad) < max_listed:
            bad.append((name, reason))

    try:
        for member in iter_members(archive, skipped=skipped, read_data=decode, on_skip=note):
            if decode:
                try:
                    decoder(member.data, scratch, 0)
                except SampleError as error:  # counted once: skipped, not also an image
                    skipped[error.reason] += 1
                    if len(bad) < max_listed:
                        bad.append((member.name, error.reason))
                    continue
                sizes.append(len(member.data))
            per_class[member.label] += 1
            places.add(member.label, member.name)
            per_split[split_folder(member.name)] += 1
        error_text = None
    except ArchiveError as error:
        error_text = str(error)
    return {"archive": archive, "images": sum(per_class.values()), "classes": dict(
        sorted(per_class.items())), "splits": dict(sorted(
            (split, n) for split, n in per_split.items() if split is not None)),
        "shared": places.shared(), "nested": places.nested(),
        "skipped": dict(sorted(skipped.items())),
        "mean_bytes": float(np.mean(sizes)) if sizes else None, "bad_members": bad,
        "error": error_text}


def print_table(summary: dict) -> None:
    counts = summary["classes"]
    print(f"{summary['archive']}: {summary['images']} images in {len(counts)} classes")
    if counts:
        values = list(counts.values())
        print(f"  per class: min {min(values)}, max {max(values)}, "
              f"mean {np.mean(values):.1f}")
        shown = list(counts.items())[:10]
        print("  " + ", ".join(f"{k}: {v}" for k, v in shown) + (" ..." if len(counts) > 10 else ""))
    if len(summary["splits"]) > 1:
        print("  splits: " + ", ".join(f"{k}: {v}" for k, v in summary["splits"].items()) +
              " (a loader reads one: Options(split=...))")
    if summary["shared"]:
        print("  " + shared_names_message(summary["archive"], summary["shared"]))
    if summary["nested"]:
        print("  " + nested_classes_message(summary["archive"], summary["nested"]))
    if summary["mean_bytes"]:
        print(f"  mean image size: {summary['mean_bytes'] / 1024:.1f} KiB")
    for reason, n in summary["skipped"].items():
        hint = REPACK_HINTS.get(reason, "").format(archive=summary["archive"])
        print(f"  skipped {n} x {reason}" + (f" ({hint})" if hint else ""))
    for name, reason in summary["bad_members"]:
        print(f"  not read {name!r}: {reason}")
    if summary["error"]:
        print(f"  ERROR: {summary['error']}")


def main(args: argparse.Namespace) -> int:
    summaries = [summarize(a, args.decode, args.max_listed) for a in expand_sources(args.archives)]
    if args.json:
        print(json.dumps(summaries, indent=1))
    else:
        for summary in summaries:
            print_table(summary)
    return 1 if any(s["error"] for s in summaries) else 0


if __name__ == "__main__":
    sys.exit(main(get_args_parser().parse_args()))
