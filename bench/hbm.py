#!/usr/bin/env python3
"""Peak HBM bandwidth of the GPU a run landed on, for the tables' bandwidth floors and "% of HBM"
columns (bench/real_scale_table.py, bench/hf_scale_table.py, bench/gemm_torch.py). No torch needed.

The GPU's name is nvidia-smi's (`--query-gpu=name,...`), the first field of the first line of a
run's env.txt that bench/real_scale.sh and bench/hf_scale.sh write, e.g.
"NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB". Names not known here get the H200's 4.8 TB/s,
marked "assumed" wherever it is printed.

  hbm.py NAME            print "hbm: <TB/s> (<what>)" for a GPU name
  hbm.py --env ENV.txt   the same for the GPU named in a run's env.txt
"""
import sys

# (substring of the name, case-insensitive; peak bytes/s), the first match wins: vendor peak figures
KNOWN = (
    ("H200", 4.8e12),              # H200 SXM / NVL, HBM3e
    ("H100 80GB HBM3", 3.35e12),   # H100 SXM5
    ("H100 NVL", 3.9e12),
    ("H100 PCIe", 2.0e12),
    ("A100-SXM4-80GB", 2.039e12),
    ("A100-SXM4-40GB", 1.555e12),
    ("A100-PCIE-40GB", 1.555e12),
)
DEFAULT = 4.8e12  # the H200's, for names not above


class Hbm:
    """bytes_s: the bandwidth used; name: the GPU's name (None when unknown); assumed: True when
    the name was not recognised and DEFAULT is used."""

    def __init__(self, name=None):
        self.name = (name or "").strip() or None
        hit = next((bw for key, bw in KNOWN if self.name and key.lower() in self.name.lower()), None)
        self.assumed = hit is None
        self.bytes_s = DEFAULT if hit is None else hit

    @property
    def tb_s(self):
        """"3.35 TB/s"."""
        return f"{self.bytes_s / 1e12:g} TB/s"

    @property
    def source(self):
        """Where the figure comes from: the GPU's name, or why it is assumed."""
        if not self.assumed:
            return self.name
        return f"assumed: GPU {self.name!r} not known" if self.name else "assumed: GPU unknown"

    @property
    def label(self):
        """"3.35 TB/s, NVIDIA H100 80GB HBM3" or "4.8 TB/s, assumed: GPU 'X' not known"."""
        return f"{self.tb_s}, {self.source}"

    def pct(self, gb_s):
        """GB/s as a percentage of this bandwidth."""
        return gb_s * 1e9 / self.bytes_s * 100


def name_from_env(path):
    """The GPU name in a run's env.txt (the first field of its first line), None without one.
    A first line that is not nvidia-smi's (e.g. "no nvidia-smi") is returned as it is: not known."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            first = fh.readline().strip()
    except OSError:
        return None
    return first.split(",")[0].strip() or None


def from_env(path):
    return Hbm(name_from_env(path))


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--env"] and len(argv) == 2:
        h = from_env(argv[1])
    elif len(argv) == 1 and not argv[0].startswith("-"):
        h = Hbm(argv[0])
    else:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print(f"hbm: {h.tb_s} ({h.source})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
