"""Benchmark k8sjobs.artifacts against oras-py and raw curl, in one run, on a local registry.

    python benchmarks/bench_artifacts.py              # 1 GiB, a few minutes
    python benchmarks/bench_artifacts.py --size 64    # quick run (MiB)

Every client runs in its own subprocess, so its peak RSS is measured alone (os.wait4), and
each reports the time of the operation itself, excluding interpreter start-up. curl reports
its own transfer time too (``-w %{time_total}``): timing its whole process instead charged
curl with its start-up, which the Python clients are spared. Needs Debian's docker-registry,
curl, tar and oras (oras-py) installed.

Two reference rows bound what any client can do for the directory pull on this machine:
bare Python that only writes the same 1000 files (data already in memory, no network, no
hashing, no checks) into a fresh directory, and GNU
``tar -xf`` of the same archive, uncompressed, from a local file. Both are timed like the
clients, interleaved with them. A third row adds up the CPU any verified pull must spend
(the registry sending the blob, curl receiving it, SHA-256 over it, the bare file writes)
and divides it by the cores: no client can be faster. If it is above a fifth of oras-py's
pull, no client can pull 5x faster than oras-py here.

Every run writes its output on a scratch filesystem: as root, a fresh ext4 with a journal
on a loop device (see ``scratch_filesystem``), as a Kubernetes node's emptyDir would be; the
header says which. As root, the page cache is dropped before every run and what the run reads
is read back, so that every client starts from the same cache.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from k8sjobs.testing.registry import RegistryServer, start_registry  # noqa: E402

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"

K8SJOBS = """
import asyncio, json, sys, time
from k8sjobs.artifacts import Registry
async def main(op, location, ref, path, compression):
    async with Registry(location, plain_http=True) as store:
        start = time.perf_counter()
        if op == "push":
            sent = (await store.push(ref, [path], compression=compression)).bytes_sent
        else:
            await store.pull(ref, path)
            sent = 0
        print(json.dumps({"seconds": time.perf_counter() - start, "sent": sent}))
asyncio.run(main(*sys.argv[1:]))
"""

ORAS = """
import json, os, sys, time, logging
logging.disable(logging.CRITICAL)
import oras.provider
op, location, ref, path = sys.argv[1:5]
client = oras.provider.Registry(hostname=location, insecure=True)
start = time.perf_counter()
if op == "push":
    os.chdir(os.path.dirname(path))
    client.push(target=f"{location}/{ref}", files=[os.path.basename(path)], quiet=True)
else:
    client.pull(target=f"{location}/{ref}", outdir=path)
print(json.dumps({"seconds": time.perf_counter() - start, "sent": 0}))
"""


@dataclass
class Run:
    """One measured operation (or the best of several, with their median)."""

    seconds: float
    rss_mib: float
    sent: int = 0
    median: float = 0.0


def measure(argv: list[str], env: dict[str, str] | None = None, self_timed: bool = True) -> Run:
    """Run a command; return its self-reported (or wall) time and its own peak RSS.

    Peak RSS comes from /usr/bin/time: a child spawned straight from this (large) Python
    process inherits its high-water mark through exec, which would inflate every figure.
    """
    os.sync()  # start each client with no dirty pages left by the previous one
    time.sleep(0.5)
    with tempfile.NamedTemporaryFile("r") as rss_file:
        timed = ["/usr/bin/time", "-f", "%M", "-o", rss_file.name, *argv]
        start = time.perf_counter()
        proc = subprocess.run(timed, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"{argv[:3]} failed:\n{proc.stderr[-2000:]}")
        rss_kib = int(rss_file.read().strip().splitlines()[-1])
    report = json.loads(proc.stdout.strip().splitlines()[-1]) if self_timed else {"seconds": wall}
    if isinstance(report, float):  # curl's -w %{time_total}
        report = {"seconds": report}
    return Run(float(report["seconds"]), rss_kib / 1024, int(report.get("sent", 0)))


def k8sjobs(
    op: str, location: str, ref: str, path: Path, env: dict[str, str], compression: str = "gzip"
) -> Run:
    return measure([sys.executable, "-c", K8SJOBS, op, location, ref, str(path), compression], env)


def oras(op: str, location: str, ref: str, path: Path) -> Run:
    return measure([sys.executable, "-c", ORAS, op, location, ref, str(path)])


WRITE_FILES = """
import json, os, sys, time
target, files, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = [os.urandom(size) for _ in range(files)]
def write(i):
    path = os.path.join(target, f"d{i % 10}", f"f{i:04d}.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, data[i])
    os.close(fd)
start = time.perf_counter()
os.mkdir(target)
for j in range(10):
    os.mkdir(os.path.join(target, f"d{j}"))
for i in range(files):  # one thread: four were 1.5-2x slower on a journaled ext4
    write(i)
print(json.dumps({"seconds": time.perf_counter() - start}))
"""

TAR_X = """
import json, subprocess, sys, time
archive, target = sys.argv[1:3]
start = time.perf_counter()
subprocess.run(["tar", "-xf", archive, "-C", target], check=True)
print(json.dumps({"seconds": time.perf_counter() - start}))
"""


def bare_write(target: Path, files: int, size: int) -> Run:
    """The floor of a directory pull: only create and write the files."""
    return measure([sys.executable, "-c", WRITE_FILES, str(target), str(files), str(size)])


def tar_extract(archive: Path, target: Path) -> Run:
    target.mkdir()
    return measure([sys.executable, "-c", TAR_X, str(archive), str(target)])


WRITE_FILES_CPU = WRITE_FILES.replace(
    "start = time.perf_counter()", "start = time.perf_counter(); cpu = time.process_time()"
).replace('{"seconds": time.perf_counter() - start}', '{"seconds": time.process_time() - cpu}')


def cpu_floor(server: RegistryServer, repo: str, work: Path, files: int, size: int) -> float:
    """Return the least wall time any client can pull the directory artifact in, on this
    machine's cores: the CPU that the registry spends sending the blob, that curl spends
    receiving it (to /dev/null), that SHA-256 takes over it, and that creating and writing
    the files takes (bare Python), divided by the number of cores. It leaves
    out tar parsing and every client's own overhead, so it is generous."""
    [url] = blob_urls(server, repo)
    os.sync()
    before, children = registry_cpu(server), os.times()
    blob = subprocess.run(["curl", "-sf", url], capture_output=True, check=True).stdout
    sent, after = registry_cpu(server) - before, os.times()
    received = (after.children_user - children.children_user) + (
        after.children_system - children.children_system
    )
    start = time.process_time()
    hashlib.sha256(blob).digest()
    hashed = time.process_time() - start
    os.sync()
    target = work / f"cpu-floor-{time.monotonic_ns()}"
    argv = [sys.executable, "-c", WRITE_FILES_CPU, str(target), str(files), str(size)]
    written = float(
        json.loads(subprocess.run(argv, capture_output=True, check=True).stdout)["seconds"]
    )
    remove(target)
    return (sent + received + hashed + written) / (os.cpu_count() or 1)


def registry_cpu(server: RegistryServer) -> float:
    assert server.process is not None
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def curl_timed(argv: list[str]) -> Run:
    """Run curl, timed by itself (transfer only, as the Python clients time themselves)."""
    return measure([*argv, "-w", "\\n%{time_total}"])


def curl_push(base: str, repo: str, path: Path, digest: str) -> Run:
    with urllib.request.urlopen(
        urllib.request.Request(f"{base}/v2/{repo}/blobs/uploads/", method="POST")
    ) as r:
        location = r.headers["Location"]
    url = f"{location}{'&' if '?' in location else '?'}digest={digest}"
    argv = [
        "curl",
        "-sf",
        "-X",
        "PUT",
        "-H",
        "Content-Type: application/octet-stream",
        "-T",
        str(path),
        url,
    ]
    return curl_timed(argv)


def curl_pull(base: str, repo: str, digest: str, dest: Path) -> Run:
    return curl_timed(["curl", "-sfL", "-o", str(dest), f"{base}/v2/{repo}/blobs/{digest}"])


def make_file(path: Path, mib: int) -> str:
    hasher = hashlib.sha256()
    with path.open("wb") as f:
        for _ in range(mib):
            chunk = os.urandom(1024 * 1024)
            hasher.update(chunk)
            f.write(chunk)
    return "sha256:" + hasher.hexdigest()


def make_tree(root: Path, files: int, size: int, text: bool = False) -> None:
    root.mkdir(parents=True)
    for i in range(files):
        sub = root / f"d{i % 10}"
        sub.mkdir(exist_ok=True)
        if text:
            rows = "".join(
                f"{i},{j},{(i * 7919 + j * 104729) % 100003 / 7.0:.6f}\n" for j in range(size // 24)
            )
            data = rows.encode()[:size]
        else:
            data = os.urandom(size)
        (sub / f"f{i:04d}.bin").write_bytes(data)


def backdate(root: Path) -> None:
    """Age files past the digest cache's one-second racy window, as data at rest would be."""
    for p in [root, *root.rglob("*")]:
        os.utime(p, (time.time() - 60, time.time() - 60))


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def removing(path: Path, run: Run) -> Run:
    """Delete what a run wrote before the next one, so that copies do not pile up."""
    remove(path)
    return run


def rate(mib: float, run: Run) -> str:
    return f"{mib / run.seconds:8.1f} MiB/s"


def row(name: str, *cells: str) -> None:
    print(f"| {name:<44} | " + " | ".join(f"{c:>20}" for c in cells) + " |")


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def settle(files: list[Path], urls: list[str]) -> None:
    """Give every run the same page cache: drop it (root only), then read back what the run
    reads (its input ``files``, the blobs at ``urls``), so that no client pays for disk
    reads and none profits from what the one before left in memory."""
    os.sync()
    if not os.access(DROP_CACHES, os.W_OK):
        return
    DROP_CACHES.write_text("1\n")
    for path in files:
        for item in [path] if path.is_file() else sorted(path.rglob("*")):
            if item.is_file():
                item.read_bytes()
    for url in urls:
        subprocess.run(["curl", "-sf", "-o", "/dev/null", url], check=True)


def blob_urls(server: RegistryServer, *repos: str) -> list[str]:
    """The URL of each repo's first layer blob (its tag is "v")."""
    urls = []
    for repo in repos:
        request = urllib.request.Request(
            f"{server.url}/v2/{repo}/manifests/v", headers={"Accept": MANIFEST_TYPE}
        )
        with urllib.request.urlopen(request) as r:
            digest = json.loads(r.read())["layers"][0]["digest"]
        urls.append(f"{server.url}/v2/{repo}/blobs/{digest}")
    return urls


def interleaved(
    runs: int,
    makers: dict[str, Callable[[int], Run]],
    files: list[Path] | None = None,
    urls: list[str] | None = None,
) -> dict[str, Run]:
    """Run every client once per round, rotating their order, and keep each one's fastest run
    (and the median); each run starts from a settled page cache holding its inputs
    (``files``, ``urls``).

    A shared VM's speed drifts over a minute; interleaving gives every client the same
    conditions, where running one client's repeats back to back did not.
    """
    results: dict[str, list[Run]] = {name: [] for name in makers}
    names = list(makers)
    for i in range(runs):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            settle(files or [], urls or [])
            results[name].append(makers[name](i))
    return {
        name: Run(
            min(r.seconds for r in rs),
            max(r.rss_mib for r in rs),
            min(rs, key=lambda r: r.seconds).sent,
            statistics.median(r.seconds for r in rs),
        )
        for name, rs in results.items()
    }


@contextmanager
def scratch_filesystem(work: Path, gib: int) -> Iterator[tuple[Path, str]]:
    """Yield a directory for the runs' outputs and the name of its filesystem.

    As root, a fresh ext4 with a journal, mounted from a sparse file in ``work`` through a
    loop device (direct I/O, so pages are not cached twice); otherwise, or if that fails,
    ``work`` itself. Why: this VM's root is ext4 *without* a journal, and there ext4 will
    not reuse an inode freed in the last 60 s (360 s while its inode table block is dirty):
    every create scans past all of them (``recently_deleted`` in perf). Right after runs
    that each deleted 1000 files, creating 1000 files cost 0.25-0.65 s instead of 0.035 s,
    for every writer alike, and a 5x ratio shrank to 2x. A journaled ext4, as on a
    Kubernetes node, took 0.039-0.050 s with deletions in between.
    """
    device, why = loop_device(work / "scratch.img", gib)
    if device is None:
        yield work, f"the work directory's filesystem ({why})"
        return
    mount = work / "scratch"
    try:
        mount.mkdir()
        subprocess.run(["mount", device, str(mount)], check=True)
        try:
            yield mount, "a fresh ext4 with a journal, on a loop device"
        finally:
            subprocess.run(["umount", str(mount)], check=True)
    finally:
        subprocess.run(["losetup", "--detach", device], check=True)


def loop_device(image: Path, gib: int) -> tuple[str | None, str]:
    """Make a journaled ext4 in a sparse ``image`` and attach it; return the device, or None
    and why not."""
    if os.geteuid() != 0:
        return None, "not root"
    if not all(shutil.which(t) for t in ("mkfs.ext4", "losetup", "mount")):
        return None, "no mkfs.ext4, losetup or mount"
    with image.open("wb") as f:
        f.truncate(gib << 30)
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
        attach = ["losetup", "--direct-io=on", "--find", "--show", str(image)]
        done = subprocess.run(attach, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        return None, f"{exc.cmd[0]}: {exc.stderr.strip()[:80]}"
    return done.stdout.strip(), ""


@dataclass
class Setup:
    """What every phase needs: the arguments, a work directory, a directory on the scratch
    filesystem for outputs, and the registry."""

    args: argparse.Namespace
    work: Path
    out: Path
    server: RegistryServer

    def env(self, i: int, tag: str) -> dict[str, str]:
        """The environment of a k8sjobs run: a fresh digest cache, so a push is a first push."""
        return {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "K8SJOBS_CACHE_DIR": str(self.work / f"cache-{tag}-{i}"),
        }


def directory_figures(setup: Setup) -> list[str]:
    """Push and pull 1000 small files with k8sjobs and oras-py, beside the floors."""
    args, work, server, env = setup.args, setup.work, setup.server, setup.env
    loc = server.location
    tree = work / "tree" / "dataset"
    make_tree(tree, args.files, args.file_kib * 1024)
    backdate(tree.parent)
    dpush = interleaved(
        args.dir_repeat,
        {
            "oras": lambda i: oras("push", loc, f"bench/orasdir{i}:v", tree),
            "k8s": lambda i: k8sjobs("push", loc, f"bench/k8sdir{i}:v", tree, env(i, "dir")),
        },
        files=[tree],
    )
    plain_tar = work / "tree.tar"
    subprocess.run(["tar", "-cf", str(plain_tar), "-C", str(tree.parent), "dataset"], check=True)
    size = args.file_kib * 1024
    out_dir = setup.out / "out-dir"
    dpull = interleaved(
        args.dir_repeat,
        {
            "oras": lambda i: removing(out_dir, oras("pull", loc, "bench/orasdir0:v", out_dir)),
            "k8s": lambda i: removing(
                out_dir, k8sjobs("pull", loc, "bench/k8sdir0:v", out_dir, env(i, "d"))
            ),
            "bare": lambda i: removing(out_dir, bare_write(out_dir, args.files, size)),
            "tar": lambda i: removing(out_dir, tar_extract(plain_tar, out_dir)),
        },
        files=[plain_tar],
        urls=blob_urls(server, "bench/orasdir0", "bench/k8sdir0"),
    )
    o_dpush, k_dpush = dpush["oras"], dpush["k8s"]
    o_dpull, k_dpull = dpull["oras"], dpull["k8s"]
    row(
        "directory push (gzip, auto level)",
        f"{k_dpush.seconds:8.3f} s",
        f"{o_dpush.seconds:8.3f} s",
        "-",
    )
    row("directory pull", f"{k_dpull.seconds:8.3f} s", f"{o_dpull.seconds:8.3f} s", "-")
    row("directory pull: median", f"{k_dpull.median:8.3f} s", f"{o_dpull.median:8.3f} s", "-")
    row(
        "  floor: bare Python writes of the files",
        "-",
        "-",
        f"{dpull['bare'].seconds:8.3f} s",
    )
    row("  floor: tar -xf of the plain tar", "-", "-", f"{dpull['tar'].seconds:8.3f} s")
    floor = min(
        cpu_floor(server, "bench/k8sdir0", setup.out, args.files, size)
        for _ in range(args.dir_repeat)
    )
    row("  floor: CPU any pull needs / cores", "-", "-", f"{floor:8.3f} s")
    return [
        f"dir push x{o_dpush.seconds / k_dpush.seconds:.1f} "
        f"and pull x{o_dpull.seconds / k_dpull.seconds:.1f} "
        f"(medians x{o_dpull.median / k_dpull.median:.1f}) vs oras-py (floor x5); "
        f"the CPU a directory pull needs (registry, receive, SHA-256, file creation) "
        f"cannot take less than {floor:.3f} s on these cores, so no client can pull "
        f"faster than x{o_dpull.seconds / floor:.1f} oras-py here",
    ]


def file_figures(setup: Setup) -> list[str]:
    """Push, pull and re-push one big file with k8sjobs, oras-py and curl."""
    args, work, server, env, n = setup.args, setup.work, setup.server, setup.env, setup.args.repeat
    loc, base, mib = server.location, server.url, float(args.size)
    big = work / "data" / "big.bin"
    big.parent.mkdir()
    digest = make_file(big, args.size)
    backdate(big.parent)

    push = interleaved(
        n,
        {
            "curl": lambda i: curl_push(base, f"bench/curl{i}", big, digest),
            "oras": lambda i: oras("push", loc, f"bench/oras{i}:big", big),
            "k8s": lambda i: k8sjobs("push", loc, f"bench/k8s{i}:big", big, env(i, "big")),
        },
        files=[big],
    )
    c_push, o_push, k_push = push["curl"], push["oras"], push["k8s"]
    row(f"push {args.size} MiB: rate", rate(mib, k_push), rate(mib, o_push), rate(mib, c_push))
    row("push: peak RSS", *(f"{r.rss_mib:8.1f} MiB" for r in (k_push, o_push, c_push)))

    out = setup.out / "out"
    pull = interleaved(
        n,
        {
            "curl": lambda i: removing(out, curl_pull(base, "bench/curl0", digest, out)),
            "oras": lambda i: removing(out, oras("pull", loc, "bench/oras0:big", out)),
            "k8s": lambda i: removing(
                out, k8sjobs("pull", loc, "bench/k8s0:big", out, env(i, "p"))
            ),
        },
        urls=[f"{base}/v2/bench/curl0/blobs/{digest}"],
    )
    c_pull, o_pull, k_pull = pull["curl"], pull["oras"], pull["k8s"]
    row(
        f"pull {args.size} MiB (k8sjobs verifies)",
        rate(mib, k_pull),
        rate(mib, o_pull),
        rate(mib, c_pull),
    )
    row("pull: peak RSS", *(f"{r.rss_mib:8.1f} MiB" for r in (k_pull, o_pull, c_pull)))

    again = interleaved(
        n,
        {
            "oras": lambda i: oras("push", loc, f"bench/oras0:again{i}", big),
            "k8s": lambda i: k8sjobs("push", loc, f"bench/k8s0:again{i}", big, env(0, "big")),
        },
        files=[big],
    )
    o_re, k_re = again["oras"], again["k8s"]
    row("re-push unchanged: time", f"{k_re.seconds:8.3f} s", f"{o_re.seconds:8.3f} s", "-")
    row("re-push unchanged: blob bytes sent", f"{k_re.sent}", "(HEAD skip)", "-")

    return [
        f"push vs curl {c_push.seconds / k_push.seconds:.0%} (floor 90%), "
        f"pull vs curl {c_pull.seconds / k_pull.seconds:.0%} (floor 90%), "
        f"re-push {k_re.seconds:.3f} s (floor 0.3 s)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1024, help="size of the big file in MiB")
    parser.add_argument("--files", type=int, default=1000, help="files in the directory test")
    parser.add_argument("--file-kib", type=int, default=64, help="size of each of those files")
    parser.add_argument(  # with 3, the push read 87-98% of curl from run to run
        "--repeat", type=int, default=5, help="runs per figure; the best counts"
    )
    parser.add_argument(
        "--dir-repeat", type=int, default=5, help="runs per directory figure (a second each)"
    )
    parser.add_argument("--only", choices=["directories", "files"], help="run one part")
    args = parser.parse_args()
    if shutil.which("curl") is None:
        raise SystemExit("curl is needed")
    work = Path(tempfile.mkdtemp(prefix="k8sjobs-bench-"))
    try:
        with scratch_filesystem(work, gib=4 + 2 * args.size // 1024) as (out, fs):
            report(Setup(args, work, out, start_registry()), fs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(setup: Setup, fs: str) -> None:
    """Print the header, the figures table, the summary and the compression table."""
    args = setup.args
    try:
        print(
            f"registry {setup.server.url}, big file {args.size} MiB, "
            f"directory {args.files} x {args.file_kib} KiB, "
            f"best of {args.repeat} ({args.dir_repeat} for directories); "
            "page cache dropped before each run: "
            f"{'yes' if os.access(DROP_CACHES, os.W_OK) else 'no (not root)'}; "
            f"outputs written on {fs}\n"
        )
        row("operation", "k8sjobs", "oras-py", "curl / reference")
        row("-" * 44, *["-" * 20] * 3)
        summary = [] if args.only == "files" else directory_figures(setup)
        summary += [] if args.only == "directories" else file_figures(setup)
        print("\n" + "\n".join(summary))
        if args.only is None:
            compression_table(setup.work, setup.server.location, setup.env(0, "comp"), args)
    finally:
        setup.server.stop()


def compression_table(work: Path, loc: str, env: dict[str, str], args: argparse.Namespace) -> None:
    """Time and size of a directory push per compression, on random and on text-like data."""
    print("\ndirectory push by compression (time, blob size)")
    row("data", "none", "gzip (auto level)", "zstd 3")
    for kind, text in (("random", False), ("csv-like text", True)):
        tree = work / f"comp-{kind[:3]}" / "dataset"
        make_tree(tree, args.files, args.file_kib * 1024, text=text)
        cells = []
        for i, compression in enumerate(("none", "gzip", "zstd")):  # gzip: auto level
            run = k8sjobs("push", loc, f"bench/comp-{kind[:3]}:{i}", tree, env, compression)
            cells.append(f"{run.seconds:6.2f}s {run.sent / 2**20:7.1f}MiB")
        row(kind, *cells)


if __name__ == "__main__":
    main()
