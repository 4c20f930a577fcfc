"""Hostile peers and hostile files (issue 7, items 5 and 6).

A bystander trainer reads epochs all along; every hostile connection must
be dropped or refused with a clear error, every limit enforced, and
afterwards the daemon holds exactly what it held before (connections,
rings, descriptors), while the bystander has lost and repeated nothing.
Files a data set should never contain are each counted, replaced and
logged, the workers survive them, and memory stays within its bounds.
"""

import io
import os
import random
import resource
import socket as pysocket
import struct
import subprocess

import pytest
from PIL import Image

import stoker
from faultutil import (ERROR, FaultClient, attach, epoch_lines, error_code, field, frame, hello, message,
                       native_memory, parse_frames, proc_status, release, report)
from stoker_testutil import BUILD, REPO, expected_samples, read_epoch
from test_faults import quiet_fds, reference, settled

SMALL = dict(batch_size=4, image_size=32)
# ErrorCode values (proto/stoker.proto).
INVALID_ARGUMENT, PROTOCOL_ERROR, VERSION_MISMATCH, RESOURCE_EXHAUSTED, FAILED_PRECONDITION = 1, 3, 4, 5, 9
ATTACHED, WELCOME, BATCH_READY = 4, 2, 6
MKJPEG = BUILD / "tests" / "mkjpeg"


def connect(path):
    s = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM)
    s.connect(path)
    s.settimeout(30)
    return s


def exchange(path, data=b"", ancillary=(), shut=True):
    """Send data (with ancillary data) on a fresh connection, then read
    until the daemon hangs up. Returns ([(kind, body)], closed)."""
    s = connect(path)
    try:
        if ancillary:
            s.sendmsg([data], list(ancillary))
        elif data:
            s.sendall(data)
        if shut:
            s.shutdown(pysocket.SHUT_WR)
    except (BrokenPipeError, ConnectionResetError):
        pass
    got, closed = b"", False
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                closed = True
                break
            got += chunk
    except ConnectionResetError:
        closed = True
    finally:
        s.close()
    return parse_frames(got), closed


def errors(frames):
    return [error_code(b) for k, b in frames if k == ERROR]


@pytest.fixture
def guarded(daemon, dataset, request):
    """A daemon, a bystander reading epochs all along, and the baseline;
    yields the daemon; afterwards checks that nothing leaked and the
    bystander read every epoch exactly."""
    d = daemon(workers=2, prefetch=2)
    by = FaultClient(d.socket, dataset, mode="epochs", **dict(SMALL, seed=1))
    by.until("S attached")
    base = settled(d, 1)
    base_fds = quiet_fds(d.proc.pid)
    d.bystander = by
    yield d
    st = settled(d, 1, base["ring_bytes"])
    end_fds = quiet_fds(d.proc.pid, base_fds)
    res = epoch_lines(by.finish())
    ref = reference(d, dataset, max(res) + 1, **dict(SMALL, seed=1))
    assert res and all(res[e] == ref[e] and not res[e][2] and not res[e][3] for e in res), (res, ref)
    assert end_fds <= base_fds, f"daemon holds {end_fds} fds, {base_fds} before"
    report(f"{request.node.name}/aftermath", fds_before=base_fds, fds_after=end_fds,
           ring_bytes_before=base["ring_bytes"], ring_bytes_after=st["ring_bytes"], bystander_epochs=len(res),
           samples_lost=0, samples_repeated=0, protocol_errors=st["protocol_errors"])


def test_hostile_bytes(guarded):
    """5a. Garbage, random bytes, over-size and truncated frames, a wrong
    protocol version, messages only the daemon sends, a first message that
    is not Hello: each peer is dropped (protocol errors answered with
    PROTOCOL_ERROR or VERSION_MISMATCH first)."""
    d = guarded
    p = d.socket
    cases = {
        "http": (b"GET / HTTP/1.1\r\nHost: stoker\r\n\r\n", [PROTOCOL_ERROR]),
        "oversize": (struct.pack("<I", 0xFFFFFFF0) + b"\0" * 64, [PROTOCOL_ERROR]),
        "one_over_max_frame": (struct.pack("<I", (64 << 10) + 1) + b"\0" * 16, [PROTOCOL_ERROR]),
        "not_protobuf": (frame(b"\xff" * 16), [PROTOCOL_ERROR]),
        "version_2": (hello(2), [VERSION_MISMATCH]),
        "version_0": (hello(0), [VERSION_MISMATCH]),
        "attach_first": (attach("/"), [PROTOCOL_ERROR]),
        "welcome_from_client": (hello() + message(WELCOME, field(1, 1), field(2, "x"), field(3, 1)),
                                [PROTOCOL_ERROR]),
        "batch_ready_from_client": (hello() + message(BATCH_READY, field(1, 0), field(2, 0), field(3, 0),
                                                      field(4, 0), field(5, 1)), [PROTOCOL_ERROR]),
        "truncated_frame": (struct.pack("<I", 100) + b"\x0a\x02", []),
        "empty": (b"", []),
    }
    before = d.stats()["protocol_errors"]
    for name, (data, want) in cases.items():
        frames, closed = exchange(p, data)
        assert closed, f"{name}: connection left open"
        assert errors(frames) == want, f"{name}: {frames}"
    rng = random.Random(7)
    for i in range(300):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 2048)))
        if rng.random() < 0.5:
            data = hello() + data  # garbage after a good greeting
        frames, closed = exchange(p, data)
        assert closed, f"random input {i} left open"
        assert set(errors(frames)) <= {PROTOCOL_ERROR, VERSION_MISMATCH, FAILED_PRECONDITION, INVALID_ARGUMENT,
                                       2, RESOURCE_EXHAUSTED}, frames
    assert d.stats()["protocol_errors"] - before >= 9
    report("hostile_bytes", cases=len(cases), random_inputs=300)


def test_hostile_descriptors(guarded):
    """5b. Descriptors where none belong: one with Hello, too many for the
    control buffer (truncated: MSG_CTRUNC), the kernel's maximum of 253,
    credentials mixed with rights. Each peer is dropped and every
    descriptor it sent is closed (the daemon's count returns)."""
    d = guarded
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        creds = struct.pack("3i", os.getpid(), os.getuid(), os.getgid())
        cases = {
            "one_with_hello": [(pysocket.SOL_SOCKET, pysocket.SCM_RIGHTS, struct.pack("i", null))],
            "five_truncated": [(pysocket.SOL_SOCKET, pysocket.SCM_RIGHTS, struct.pack("5i", *[null] * 5))],
            "max_253": [(pysocket.SOL_SOCKET, pysocket.SCM_RIGHTS, struct.pack("253i", *[null] * 253))],
            "creds_and_rights": [(pysocket.SOL_SOCKET, pysocket.SCM_CREDENTIALS, creds),
                                 (pysocket.SOL_SOCKET, pysocket.SCM_RIGHTS, struct.pack("3i", *[null] * 3))],
        }
        for name, anc in cases.items():
            for data in (hello(), hello() + STATS):
                frames, closed = exchange(d.socket, data, ancillary=anc)
                assert closed and errors(frames) == [PROTOCOL_ERROR], f"{name}: {frames}"
        # Rights sent after a good greeting, with a stats request.
        s = connect(d.socket)
        s.sendall(hello())
        s.sendmsg([STATS], cases["max_253"])
        s.shutdown(pysocket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        s.close()
        assert PROTOCOL_ERROR in errors(parse_frames(data))
    finally:
        os.close(null)
    report("hostile_descriptors", cases=len(cases) * 2 + 1, fds_sent_max=253)


STATS = message(9)


def read_reply(s, want=(ATTACHED, ERROR)):
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return parse_frames(data), True
        data += chunk
        frames = parse_frames(data)
        if any(k in want for k, _ in frames):
            return frames, False


def test_attach_burst(guarded, dataset):
    """5c. 1,000 connections attach at once: max_clients (here 200) is
    enforced with a clear RESOURCE_EXHAUSTED for the rest, the bystander
    is unaffected, and when they all hang up everything is returned."""
    d = guarded
    d.ctl("set", "max_clients=200")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    socks = []
    try:
        for _ in range(1000):
            s = connect(d.socket)
            try:
                s.sendall(hello() + attach(dataset, prefetch=1))
            except (BrokenPipeError, ConnectionResetError):
                pass
            socks.append(s)
        attached = refused = 0
        for s in socks:
            frames, _ = read_reply(s)
            kinds = [k for k, _ in frames]
            if ATTACHED in kinds:
                attached += 1
            else:
                assert errors(frames) == [RESOURCE_EXHAUSTED], frames
                refused += 1
        # The bystander is one of the 200.
        assert attached == 199 and refused == 801, (attached, refused)
    finally:
        for s in socks:
            s.close()
    assert "max_clients" in d.stderr()
    d.ctl("set", "max_clients=256")
    report("attach_burst", connections=1000, max_clients=200, attached=attached, refused=refused)


def test_other_clients_slots(guarded, dataset):
    """5d. A client asks to release slots it does not hold (every slot of
    its ring, ones past it, 2^32-1), twice the one it holds, starts epochs
    and releases before attaching, attaches twice: each request is refused
    (INVALID_ARGUMENT / FAILED_PRECONDITION) and changes nothing for the
    client holding a batch next to it."""
    d = guarded
    holder = FaultClient(d.socket, dataset, take=1, trace=1, **dict(SMALL, seed=3))
    holder.until("S ready")
    held = holder.cmd("hash").split()[3]
    s = connect(d.socket)
    s.sendall(hello() + release(0) + message(5, field(1, 0), field(2, 1)))
    frames, _ = read_reply(s, want=(ERROR,))
    while len(errors(frames)) < 2:
        more, _ = read_reply(s, want=(ERROR,))
        frames += more
    assert errors(frames) == [FAILED_PRECONDITION, FAILED_PRECONDITION], frames
    s.sendall(attach(dataset, seed=3, prefetch=1))
    read_reply(s, want=(ATTACHED,))
    # Slots past its 2-slot ring, then slot 0 twice (held at most once),
    # then a second attach, whose refusal comes last.
    bad = list(range(2, 8)) + [1 << 20, (1 << 32) - 1]
    s.sendall(b"".join(release(k) for k in bad) + release(0) + release(0) + attach(dataset))
    data = b""
    while FAILED_PRECONDITION not in errors(parse_frames(data)):
        chunk = s.recv(65536)
        assert chunk, f"dropped: {parse_frames(data)}"
        data += chunk
    codes = errors(parse_frames(data))
    assert codes.count(INVALID_ARGUMENT) >= len(bad) + 1 and codes[-1] == FAILED_PRECONDITION, codes
    s.close()
    assert holder.cmd("hash").split()[3] == held
    r = holder.cmd("next 60000")
    assert r.split()[1] == "0", r
    holder.finish()
    report("other_clients_slots", forged_releases=len(bad), refused=len(codes), holder_unaffected=True)


# ---- hostile files ----

def jpeg_bytes(im, **kw):
    buf = io.BytesIO()
    im.save(buf, "JPEG", **kw)
    return buf.getvalue()


def photo(size=(320, 240), mode="RGB"):
    im = Image.open(REPO / "data" / "photos" / "coffee.png").convert("RGB").resize(size)
    return im.convert(mode)


def patch_sof(data, **kw):
    """Rewrite the first SOF marker's precision, height or width."""
    b = bytearray(data)
    i = 2
    while i < len(b):
        assert b[i] == 0xFF
        marker = b[i + 1]
        n = int.from_bytes(b[i + 2:i + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if "precision" in kw:
                b[i + 4] = kw["precision"]
            if "height" in kw:
                b[i + 5:i + 7] = kw["height"].to_bytes(2, "big")
            if "width" in kw:
                b[i + 7:i + 9] = kw["width"].to_bytes(2, "big")
            return bytes(b)
        i += 2 + n
    raise AssertionError("no SOF")


def huge_exif(data, segments=64):
    """APP1 Exif segments of 64 KiB each, after SOI: 4 MiB of metadata."""
    seg = b"\xff\xe1" + (65535).to_bytes(2, "big") + b"Exif\0\0" + b"\0" * (65533 - 6)
    return data[:2] + seg * segments + data[2:]


def mkjpeg(kind, w, h, out):
    r = subprocess.run([str(MKJPEG), kind, str(w), str(h), str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out.read_bytes()


@pytest.fixture(scope="module")
def hostile_dataset(tmp_path_factory):
    """One class of good photos with every kind of hostile file among them.
    Returns (root, {name: should_decode})."""
    root = tmp_path_factory.mktemp("hostile")
    cls = root / "a"
    cls.mkdir()
    good = jpeg_bytes(photo(), quality=90)
    rng = random.Random(3)
    tmp = tmp_path_factory.mktemp("mk")
    files = {
        "truncated": (good[:len(good) // 2], False),
        "zero_byte": (b"", False),
        "random_bytes": (bytes(rng.randrange(256) for _ in range(20000)), False),
        "random_after_soi": (b"\xff\xd8" + bytes(rng.randrange(256) for _ in range(20000)), False),
        "header_65500x65500": (patch_sof(good, height=65500, width=65500), False),
        "thousands_of_scans": (mkjpeg("scans", 96, 64, tmp / "scans.jpg"), False),
        "twelve_bit": (patch_sof(good, precision=12), False),
        "zero_width": (patch_sof(good, width=0), False),
        "cmyk": (jpeg_bytes(photo().convert("CMYK"), quality=90), True),
        "grayscale": (jpeg_bytes(photo(mode="L"), quality=90), True),
        "arithmetic": (mkjpeg("arith", 320, 240, tmp / "arith.jpg"), True),
        "huge_exif": (huge_exif(good), True),
        "progressive": (jpeg_bytes(photo(), quality=90, progressive=True), True),
    }
    names = {}
    for i, (name, (data, ok)) in enumerate(files.items()):
        (cls / f"h{i:02d}_{name}.jpg").write_bytes(data)
        (cls / f"g{i:02d}.jpg").write_bytes(jpeg_bytes(photo((200 + i * 8, 160)), quality=85))
        names[name] = ok
    return root, names


def test_hostile_files(daemon, hostile_dataset):
    """6. Each hostile file is counted, replaced by the next good sample and
    logged once with its reason; the 65500x65500 header is refused by the
    pixel cap before any pixel memory, the 2,090-scan file by the scan
    limit; the workers survive (same threads, later epochs fine); peak
    memory stays within bounds."""
    root, names = hostile_dataset
    samples = expected_samples(root)
    bad = {i for i, (p, _) in enumerate(samples) for n, ok in names.items() if p.endswith(f"_{n}.jpg") and not ok}
    d = daemon(workers=2)
    pid = d.proc.pid
    hwm0 = proc_status(pid, "VmHWM")
    threads0 = d.stats()["worker_threads"]
    epochs = []
    with stoker.Loader(root, socket=d.socket, batch_size=4, image_size=64, seed=1) as ld:
        for epoch in range(3):
            ld.set_epoch(epoch)
            epochs.append(read_epoch(ld))
    st = d.stats()
    hwm = proc_status(pid, "VmHWM")
    for r in epochs:
        assert r["replaced"] == len(bad), (r["replaced"], len(bad))
        assert not set(r["indices"]) & bad, "a hostile file was delivered"
        assert len(r["indices"]) == len(samples)
    assert st["decode_errors"] >= 3 * len(bad)
    assert st["worker_threads"] == threads0 and d.proc.poll() is None
    err = d.stderr()
    for name, ok in names.items():
        lines = [x for x in err.splitlines() if f"_{name}.jpg" in x]
        assert len(lines) == (0 if ok else 1), f"{name}: {lines}"  # logged once, not per epoch
    assert "over the limit" in next(x for x in err.splitlines() if "65500x65500" in x)
    assert "More than 500 scans" in next(x for x in err.splitlines() if "thousands_of_scans" in x)
    # A 65500x65500 image would need 16 GiB decoded: the peak stays small.
    if native_memory():
        assert hwm - hwm0 < (96 << 20), f"peak RSS grew {(hwm - hwm0) >> 20} MiB"
    report("hostile_files", files=len(names), refused=len(bad), decoded=len(names) - len(bad), epochs=3,
           decode_errors=st["decode_errors"], worker_threads=st["worker_threads"], peak_rss_growth=hwm - hwm0)


def test_decode_memory_bounded_by_pixel_cap(daemon, tmp_path):
    """6b. Memory per decode follows the pixel cap: progressive files just
    under a lowered cap (whose coefficients libjpeg must hold whole) decode,
    one just over is refused, and the peak stays within workers x cap x 8
    bytes (the most a 4-component progressive image needs) over baseline."""
    cap = 4 << 20
    cls = tmp_path / "big" / "a"
    cls.mkdir(parents=True)
    for i in range(4):
        mkjpeg("progressive", 2000, 2000 + i, cls / f"ok{i}.jpg")  # 4.0M pixels: under
    mkjpeg("progressive", 2100, 2100, cls / "over.jpg")             # 4.4M: over
    d = daemon(workers=2, extra=["--set", f"max_image_pixels={cap}"])
    hwm0 = proc_status(d.proc.pid, "VmHWM")
    with stoker.Loader(tmp_path / "big", socket=d.socket, batch_size=5, image_size=64, shuffle=False) as ld:
        r = read_epoch(ld)
    hwm = proc_status(d.proc.pid, "VmHWM")
    assert r["replaced"] == 1 and 4 not in r["indices"]
    bound = 2 * cap * 8 + (32 << 20)
    if native_memory():
        assert hwm - hwm0 <= bound, f"peak grew {(hwm - hwm0) >> 20} MiB, bound {bound >> 20} MiB"
    report("decode_memory", pixel_cap=cap, workers=2, peak_rss_growth=hwm - hwm0, bound=bound)
