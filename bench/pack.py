"""Pack the bench's exported programs so that the next run can skip their exports.

  pack.py --models DIR --out bench_models.tar.xz [--limit-mb 15]

Every DIR/<name>/ that has a manifest.json becomes one tar in its own xz stream;
the streams are concatenated, smallest first, as long as the total stays within
--limit-mb (the rest is listed as left out: the next run exports it again).
Unpack with `tar -xJif bench_models.tar.xz -C DIR` (-i reads past each stream's
end-of-archive), which bench/run.sh does for BENCH_MODELS_TAR.
"""
import argparse
import io
import lzma
import os
import sys
import tarfile


def pack_one(root, name):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        t.add(os.path.join(root, name), arcname=name)
    return lzma.compress(buf.getvalue(), preset=6)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit-mb", type=float, default=15)
    a = ap.parse_args()
    names = sorted(n for n in os.listdir(a.models) if os.path.isfile(os.path.join(a.models, n, "manifest.json")))
    # Smallest first by size on disk (compressing everything first would cost minutes for
    # heavy_bf16's 320 MiB of random weights).
    sizes = {n: sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(os.path.join(a.models, n)) for f in fs)
             for n in names}
    limit = a.limit_mb * 2**20
    total, kept, left = 0, [], []
    with open(a.out + ".tmp", "wb") as f:
        for n in sorted(names, key=lambda n: sizes[n]):
            if total + sizes[n] * 0.3 > limit:  # no chance to fit even at 30 %
                left.append(f"{n} ({sizes[n] / 2**20:.1f} MiB on disk)")
                continue
            blob = pack_one(a.models, n)
            if total + len(blob) > limit:
                left.append(f"{n} ({len(blob) / 2**20:.1f} MiB compressed)")
                continue
            f.write(blob)
            total += len(blob)
            kept.append(n)
    os.replace(a.out + ".tmp", a.out)
    print(f"bench_models.tar.xz: {len(kept)} program(s), {total / 2**20:.1f} MiB ({', '.join(kept) or 'none'})"
          + (f"; left out (over {a.limit_mb:g} MiB): {', '.join(left)}" if left else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
