#!/usr/bin/env python3
"""Write one small image file of every format variant stoker decodes.

    mkimages.py OUTDIR [--side N]

Each file is named after its variant; the extension is the format's own, so
content sniffing is what decides. Pillow writes what it can; PNG bit depths
and interlacing, BMP layouts Pillow does not write (RLE, 16-bit, bit fields,
OS/2 and top-down headers) and plain netpbm are written by hand here, and
TIFF layouts Pillow does not write (tiles, separate planes, predictors, fill
order) by libtiff's tiffcp. Used by tests/integration/test_formats.py and
for the decoders' fuzz seeds (make fuzz-build).

variants(outdir) returns [(name, path, lossy)] for the tests.
"""

import argparse
import io
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
PHOTOS = REPO / "data" / "photos"


def source(w=97, h=61):
    """A real photo crop with a non-trivial alpha ramp, odd sizes on purpose."""
    im = Image.open(PHOTOS / "chelsea.png").convert("RGB").resize((w, h), Image.Resampling.BILINEAR)
    a = np.add.outer(np.linspace(0, 255, h), np.linspace(0, 255, w)) / 2
    rgba = np.dstack([np.asarray(im), a.astype(np.uint8)])
    return Image.fromarray(rgba, "RGBA")


# ---- PNG, by hand ----

def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def _pack_row(samples, depth):
    """One row of samples (ints) at `depth` bits, big-endian, packed."""
    if depth == 16:
        return b"".join(struct.pack(">H", int(v)) for v in samples)
    if depth == 8:
        return bytes(int(v) for v in samples)
    out, acc, n = bytearray(), 0, 0
    for v in samples:
        acc = (acc << depth) | int(v)
        n += depth
        if n == 8:
            out.append(acc)
            acc, n = 0, 0
    if n:
        out.append(acc << (8 - n))
    return bytes(out)


def png_bytes(samples, depth, ctype, plte=None, trns=None, interlace=False):
    """samples: array [h, w, channels] of ints."""
    h, w = samples.shape[:2]
    flat = samples.reshape(h, w, -1)

    def rows(img):
        return b"".join(b"\0" + _pack_row(r.reshape(-1), depth) for r in img)

    if interlace:
        raw = b""
        for x0, y0, dx, dy in ADAM7:
            sub = flat[y0::dy, x0::dx]
            if sub.size:
                raw += rows(sub)
    else:
        raw = rows(flat)
    out = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, int(interlace)))
    if plte is not None:
        out += _chunk(b"PLTE", bytes(plte))
    if trns is not None:
        out += _chunk(b"tRNS", trns)
    return out + _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b"")


# ---- BMP, by hand ----

def bmp_bytes(w, h, bits, pixel_rows, palette=None, header=40, compression=0, masks=None, top_down=False,
              colors=None, data=None):
    """pixel_rows: the file's rows (bytes, unpadded), in file order."""
    if data is None:
        stride = ((w * bits + 31) >> 3) & ~3
        data = b"".join(r + b"\0" * (stride - len(r)) for r in pixel_rows)
    entry = 3 if header == 12 else 4
    pal = b""
    if palette is not None:
        pal = b"".join(bytes([b, g, r]) + (b"\0" if entry == 4 else b"") for r, g, b in palette)
    extra = b""
    if header == 12:
        info = struct.pack("<IHHHH", 12, w, h, 1, bits)
    else:
        info = struct.pack("<IiiHHIIiiII", header, w, -h if top_down else h, 1, bits, compression, len(data),
                           2835, 2835, len(palette) if colors is None and palette else (colors or 0), 0)
        if masks is not None and header == 40:
            extra = struct.pack("<III", *masks[:3])
        tail = b""
        if header >= 52:
            m = list(masks or (0, 0, 0, 0)) + [0] * 4
            tail = struct.pack("<III", *m[:3]) + (struct.pack("<I", m[3]) if header >= 56 else b"")
        info += tail + b"\0" * (header - len(info) - len(tail))
    off = 14 + len(info) + len(extra) + len(pal)
    return b"BM" + struct.pack("<IHHI", off + len(data), 0, 0, off) + info + extra + pal + data


def rle8(rows_idx):
    """RLE8: runs of equal indices, absolute runs for mixed ones, EOL per row, EOB."""
    out = bytearray()
    for row in rows_idx:
        i = 0
        while i < len(row):
            j = i
            while j < len(row) and j - i < 255 and row[j] == row[i]:
                j += 1
            if j - i >= 3 or len(row) - i < 3:
                out += bytes([j - i, row[i]])
                i = j
            else:
                k = i
                while k < len(row) and k - i < 255 and not (k + 2 < len(row) and row[k] == row[k + 1] == row[k + 2]):
                    k += 1
                if k - i < 3:
                    out += bytes([1, row[i]])
                    i += 1
                    continue
                out += bytes([0, k - i]) + bytes(row[i:k])
                if (k - i) % 2:
                    out += b"\0"
                i = k
        out += b"\0\0"
    return bytes(out + b"\0\1")


def rle4(rows_idx):
    """RLE4: encoded runs of two alternating nibbles only (simple and valid), plus a delta and an absolute run."""
    out = bytearray()
    for y, row in enumerate(rows_idx):
        i = 0
        if y == 1:
            out += bytes([0, 4]) + bytes([(row[0] << 4) | row[1], (row[2] << 4) | row[3]]) + b"\0\0"
            i = 4
        while i < len(row):
            n = min(2, len(row) - i)
            out += bytes([n, (row[i] << 4) | (row[i + 1] if n == 2 else 0)])
            i += n
        out += b"\0\0"
    # a delta into the last row, then end of bitmap: the skipped pixels stay index 0
    return bytes(out[:-2] + b"\0\2\3\0" + b"\0\1")


# ---- TIFF, by hand: the sample layouts neither Pillow nor tiffcp write ----

def tiff_bytes(w, h, photometric, bps, samples, extra=(), sampleformat=1, colormap=None, big_endian=False):
    """An uncompressed one-strip TIFF; `samples` the strip's bytes."""
    e = ">" if big_endian else "<"
    spp = len(bps)
    tags = [(256, 4, [w]), (257, 4, [h]), (258, 3, list(bps)), (259, 3, [1]), (262, 3, [photometric]),
            (273, 4, [0]), (277, 3, [spp]), (278, 4, [h]), (279, 4, [len(samples)])]
    if extra:
        tags.append((338, 3, list(extra)))
    if sampleformat != 1:
        tags.append((339, 3, [sampleformat] * spp))
    if colormap is not None:
        tags.append((320, 3, list(colormap)))
    tags.sort()
    ifd_len = 2 + 12 * len(tags) + 4
    blobs, at = b"", 8 + ifd_len
    entries = []
    for tag, kind, vals in tags:
        raw = b"".join(struct.pack(e + ("H" if kind == 3 else "I"), v) for v in vals)
        if len(raw) <= 4:
            entries.append((tag, kind, len(vals), raw + b"\0" * (4 - len(raw))))
        else:
            entries.append((tag, kind, len(vals), struct.pack(e + "I", at + len(blobs))))
            blobs += raw + b"\0" * (len(raw) % 2)
    strip_at = at + len(blobs)
    body = struct.pack(e + "H", len(entries))
    for tag, kind, n, val in entries:
        if tag == 273:
            val = struct.pack(e + "I", strip_at)
        body += struct.pack(e + "HHI", tag, kind, n) + val
    head = (b"MM\0*" if big_endian else b"II*\0") + struct.pack(e + "I", 8)
    return head + body + b"\0\0\0\0" + blobs + samples


# ---- netpbm, by hand ----

def pnm_plain(kind, arr, maxval=255):
    h, w = arr.shape[:2]
    head = f"P{kind}\n# a comment\n{w} {h}\n" + ("" if kind == 1 else f"{maxval}\n")
    vals = arr.reshape(-1)
    body = "\n".join(" ".join(str(int(v)) for v in vals[i:i + 17]) for i in range(0, len(vals), 17))
    return (head + body + "\n").encode()


def pnm_raw(kind, arr, maxval):
    h, w = arr.shape[:2]
    head = f"P{kind}\n{w} {h}\n{maxval}\n".encode()
    vals = arr.reshape(-1).astype(np.uint32)
    return head + (vals.astype(">u2").tobytes() if maxval > 255 else vals.astype(np.uint8).tobytes())


def variants(out, side=None):
    """Write every variant into `out`; [(name, path, lossy)]."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    src = source(*(side or (97, 61)))
    w, h = src.size
    rgba = np.asarray(src)
    rgb = rgba[..., :3]
    grey = np.asarray(src.convert("L"))
    pal_im = src.convert("RGB").quantize(colors=200)
    idx = np.asarray(pal_im).astype(np.int64)
    pal = pal_im.getpalette()[:200 * 3]
    made = []

    def put(name, data, lossy=False):
        p = out / name
        p.write_bytes(data)
        made.append((name, p, lossy))

    def pil(name, im, fmt, lossy=False, **kw):
        b = io.BytesIO()
        im.save(b, fmt, **kw)
        put(name, b.getvalue(), lossy)

    rng = np.random.default_rng(3)
    # PNG: every colour type and depth
    for depth in (1, 2, 4, 8, 16):
        g = (grey.astype(np.uint32) * ((1 << depth) - 1) // 255)
        if depth == 16:
            g = rng.integers(0, 65536, size=grey.shape)
            g[::3] = rng.integers(0, 300, size=g[::3].shape)  # around Pillow's clip at 255
        put(f"png_grey{depth}.png", png_bytes(g[..., None], depth, 0))
        put(f"png_grey{depth}_adam7.png", png_bytes(g[..., None], depth, 0, interlace=True))
    for depth in (1, 2, 4, 8):
        n = 1 << depth
        ix = idx % n
        # a PLTE shorter than the indices used: Pillow's palette is black past it
        plte = pal[:3 * max(1, n - 1)]
        put(f"png_pal{depth}.png", png_bytes(ix[..., None], depth, 3, plte=plte, trns=bytes([0, 128])))
        put(f"png_pal{depth}_adam7.png", png_bytes(ix[..., None], depth, 3, plte=plte, interlace=True))
    wide = (rgb.astype(np.uint32) * 257) ^ rng.integers(0, 256, size=rgb.shape)
    put("png_rgb16.png", png_bytes(wide, 16, 2))
    put("png_rgba16_adam7.png", png_bytes(np.dstack([wide, wide[..., :1]]), 16, 6, interlace=True))
    put("png_la16.png", png_bytes(np.dstack([wide[..., :1], wide[..., 1:2]]), 16, 4))
    put("png_la8.png", png_bytes(np.dstack([grey, rgba[..., 3]]), 8, 4))
    put("png_rgb8_trns.png", png_bytes(rgb, 8, 2, trns=struct.pack(">HHH", *rgb[0, 0])))
    put("png_grey8_trns.png", png_bytes(grey[..., None], 8, 0, trns=struct.pack(">H", int(grey[0, 0]))))
    put("png_grey16_trns.png", png_bytes(wide[..., :1], 16, 0, trns=struct.pack(">H", 7)))
    pil("png_rgb8.png", src.convert("RGB"), "PNG")
    pil("png_rgba8.png", src, "PNG")
    put("png_rgba8_adam7.png", png_bytes(rgba, 8, 6, interlace=True))
    pil("png_pil_p.png", pal_im, "PNG", transparency=5)
    pil("png_pil_l.png", src.convert("L"), "PNG")
    pil("png_pil_1.png", src.convert("1"), "PNG")
    pil("png_pil_i16.png", Image.fromarray(wide[..., 0].astype(np.uint16)), "PNG")
    # an APNG: Pillow opens its default image, the IDAT one
    pil("png_apng.png", src.convert("RGB"), "PNG", save_all=True,
        append_images=[src.convert("RGB").transpose(Image.Transpose.FLIP_LEFT_RIGHT)])

    # WebP: lossy, lossless, with alpha, animated
    pil("webp_lossy.webp", src.convert("RGB"), "WEBP", lossy=True, quality=80)
    pil("webp_lossy_alpha.webp", src, "WEBP", lossy=True, quality=80)
    pil("webp_lossless.webp", src.convert("RGB"), "WEBP", lossless=True)
    pil("webp_lossless_alpha.webp", src, "WEBP", lossless=True)
    pil("webp_anim.webp", src, "WEBP", lossless=True, save_all=True,
        append_images=[src.transpose(Image.Transpose.FLIP_LEFT_RIGHT)], duration=100)

    # BMP: Pillow's own, then the layouts it reads but does not write
    pil("bmp_rgb24.bmp", src.convert("RGB"), "BMP")
    pil("bmp_l8.bmp", src.convert("L"), "BMP")
    pil("bmp_p8.bmp", pal_im, "BMP")
    pil("bmp_1.bmp", src.convert("1"), "BMP")
    pil("bmp_rgba32.bmp", src, "BMP")
    bgr = rgb[..., ::-1]
    bottom_up = lambda rows: rows[::-1]  # noqa: E731
    put("bmp_rgb24_topdown.bmp", bmp_bytes(w, h, 24, [r.tobytes() for r in bgr], top_down=True))
    put("bmp_os2_24.bmp", bmp_bytes(w, h, 24, bottom_up([r.tobytes() for r in bgr]), header=12))
    i4 = idx % 16
    pal16 = [tuple(pal[3 * i:3 * i + 3]) for i in range(16)]
    rows4 = [_pack_row(r, 4) for r in i4]
    put("bmp_p4.bmp", bmp_bytes(w, h, 4, bottom_up(rows4), palette=pal16))
    put("bmp_os2_p8.bmp", bmp_bytes(w, h, 8, bottom_up([r.tobytes() for r in idx.astype(np.uint8)]),
                                    palette=[tuple(pal[3 * i:3 * i + 3]) for i in range(200)], header=12))
    pal256 = [tuple(pal[3 * i:3 * i + 3]) for i in range(200)]
    put("bmp_p8_short_palette.bmp", bmp_bytes(w, h, 8, bottom_up([(r % 256).astype(np.uint8).tobytes()
                                                                    for r in (idx + 40)]), palette=pal256))
    c5 = (rgb.astype(np.uint32) * 31 + 127) // 255
    p555 = (c5[..., 0] << 10) | (c5[..., 1] << 5) | c5[..., 2]
    put("bmp_555.bmp", bmp_bytes(w, h, 16, bottom_up([r.astype("<u2").tobytes() for r in p555])))
    put("bmp_555_bitfields.bmp", bmp_bytes(w, h, 16, bottom_up([r.astype("<u2").tobytes() for r in p555]),
                                           compression=3, masks=(0x7C00, 0x3E0, 0x1F)))
    g6 = (rgb[..., 1].astype(np.uint32) * 63 + 127) // 255
    p565 = (c5[..., 0] << 11) | (g6 << 5) | c5[..., 2]
    put("bmp_565_v4.bmp", bmp_bytes(w, h, 16, bottom_up([r.astype("<u2").tobytes() for r in p565]), header=108,
                                    compression=3, masks=(0xF800, 0x7E0, 0x1F, 0)))
    a = rgba[..., 3]
    bgra = np.dstack([rgb[..., 2], rgb[..., 1], rgb[..., 0], a])
    put("bmp_bgra32_v5.bmp", bmp_bytes(w, h, 32, bottom_up([r.tobytes() for r in bgra]), header=124, compression=3,
                                       masks=(0xFF0000, 0xFF00, 0xFF, 0xFF000000)))
    rgba_b = np.dstack([rgb, a])
    put("bmp_rgba32_v3.bmp", bmp_bytes(w, h, 32, bottom_up([r.tobytes() for r in rgba_b]), header=56, compression=3,
                                       masks=(0xFF, 0xFF00, 0xFF0000, 0xFF000000)))
    xbgr = np.dstack([a, rgb[..., 2], rgb[..., 1], rgb[..., 0]])
    put("bmp_xbgr32.bmp", bmp_bytes(w, h, 32, bottom_up([r.tobytes() for r in xbgr]), compression=3,
                                    masks=(0xFF000000, 0xFF0000, 0xFF00)))
    put("bmp_bgrx32_raw.bmp", bmp_bytes(w, h, 32, bottom_up([r.tobytes() for r in bgra])))
    i8 = (idx // 8).astype(np.uint8)  # long runs
    put("bmp_rle8.bmp", bmp_bytes(w, h, 8, None, palette=pal256, compression=1, data=rle8(bottom_up(list(i8)))))
    put("bmp_rle8_topdown.bmp", bmp_bytes(w, h, 8, None, palette=pal256, compression=1, top_down=True,
                                          data=rle8(list(i8))))
    put("bmp_rle4.bmp", bmp_bytes(w, h, 4, None, palette=pal16, compression=2, data=rle4(bottom_up(list(i4)))))
    grey_ramp = [(i, i, i) for i in range(256)]
    put("bmp_grey_ramp8.bmp", bmp_bytes(w, h, 8, bottom_up([r.tobytes() for r in grey]), palette=grey_ramp))

    # TIFF: Pillow's (its libtiff for compression), then tiffcp's layouts
    for mode in ("RGB", "RGBA", "L", "LA", "1", "P", "CMYK", "I;16"):
        im = pal_im if mode == "P" else src.convert(mode) if mode != "I;16" else \
            Image.fromarray(wide[..., 0].astype(np.uint16))
        tag = mode.replace(";", "").lower()
        for comp in ("raw", "tiff_lzw", "tiff_adobe_deflate", "packbits"):
            if mode == "1" and comp == "tiff_adobe_deflate":
                continue
            pil(f"tiff_{tag}_{comp}.tif", im, "TIFF", compression=comp)
    pil("tiff_rgb_jpeg.tif", src.convert("RGB"), "TIFF", lossy=True, compression="jpeg", quality=90)
    pil("tiff_1_g4.tif", src.convert("1"), "TIFF", compression="group4")
    # two pages: the first is the image, as Image.open gives it
    pil("tiff_multipage.tif", src.convert("RGB"), "TIFF", compression="tiff_lzw", save_all=True,
        append_images=[src.convert("L")])
    if not shutil.which("tiffcp"):
        raise SystemExit("mkimages: tiffcp (Debian's libtiff-tools) is needed for the tiled and planar TIFFs")
    base = out / "tiff_rgb_raw.tif"
    for name, args in (("tiled_lzw", ["-t", "-w", "32", "-l", "16", "-c", "lzw"]),
                       ("separate_zip", ["-p", "separate", "-c", "zip"]),
                       ("tiled_separate", ["-t", "-w", "16", "-l", "16", "-p", "separate"]),
                       ("predictor_lzw", ["-c", "lzw:2", "-r", "7"]),
                       ("lsb2msb", ["-f", "lsb2msb", "-r", "5"])):
        subprocess.run(["tiffcp", *args, str(base), str(out / f"tiff_cp_{name}.tif")], check=True)
        made.append((f"tiff_cp_{name}.tif", out / f"tiff_cp_{name}.tif", False))
    for src_name, name, args in (("tiff_1_raw.tif", "1_lsb2msb_tiled", ["-f", "lsb2msb", "-t", "-w", "16",
                                                                      "-l", "16"]),
                                 ("tiff_rgba_raw.tif", "rgba_separate", ["-p", "separate", "-c", "lzw"]),
                                 ("tiff_cmyk_raw.tif", "cmyk_tiled", ["-t", "-w", "16", "-l", "32"]),
                                 ("tiff_rgb_raw.tif", "ycbcr_jpeg", ["-c", "jpeg:r:90", "-r", "16"])):
        subprocess.run(["tiffcp", *args, str(out / src_name), str(out / f"tiff_cp_{name}.tif")], check=True)
        made.append((f"tiff_cp_{name}.tif", out / f"tiff_cp_{name}.tif", name == "ycbcr_jpeg"))

    # sample layouts only Pillow's own unpackers read: premultiplied alpha, min-is-white, 16-bit, signed
    premul = (rgb.astype(np.uint32) * a[..., None] // 255).astype(np.uint8)
    put("tiff_rgba_premultiplied.tif", tiff_bytes(w, h, 2, (8, 8, 8, 8), np.dstack([premul, a]).tobytes(), extra=(1,)))
    put("tiff_rgbx.tif", tiff_bytes(w, h, 2, (8, 8, 8, 8), np.dstack([rgb, a]).tobytes(), extra=(0,)))
    put("tiff_miniswhite8.tif", tiff_bytes(w, h, 0, (8,), grey.tobytes()))
    put("tiff_miniswhite4.tif", tiff_bytes(w, h, 0, (4,), b"".join(_pack_row(r, 4) for r in grey >> 4)))
    put("tiff_grey2.tif", tiff_bytes(w, h, 1, (2,), b"".join(_pack_row(r, 2) for r in grey >> 6)))
    put("tiff_rgb16_be.tif", tiff_bytes(w, h, 2, (16, 16, 16), wide.astype(">u2").tobytes(), big_endian=True))
    put("tiff_rgba16.tif", tiff_bytes(w, h, 2, (16,) * 4, np.dstack([wide, wide[..., :1]]).astype("<u2").tobytes(),
                                      extra=(2,)))
    put("tiff_grey16s.tif", tiff_bytes(w, h, 1, (16,), (wide[..., 0].astype(np.int64) - 32768).astype("<i2")
                                       .tobytes(), sampleformat=2))
    cmap = [v * 257 for v in (pal[0::3][:16] + [0] * 16)[:16]] + [v * 257 for v in (pal[1::3][:16] + [0] * 16)[:16]] \
        + [v * 257 for v in (pal[2::3][:16] + [0] * 16)[:16]]
    put("tiff_p4.tif", tiff_bytes(w, h, 3, (4,), b"".join(_pack_row(r, 4) for r in i4), colormap=cmap))
    put("tiff_cmyk16.tif", tiff_bytes(w, h, 5, (16,) * 4, (np.asarray(src.convert("CMYK")).astype(np.uint32) * 257)
                                      .astype("<u2").tobytes()))

    # netpbm
    pil("pnm_p6.ppm", src.convert("RGB"), "PPM")
    pil("pnm_p5.pgm", src.convert("L"), "PPM")
    pil("pnm_p4.pbm", src.convert("1"), "PPM")
    put("pnm_p5_16.pgm", pnm_raw(5, wide[..., 0], 65535))
    put("pnm_p5_1000.pgm", pnm_raw(5, wide[..., 0] % 1001, 1000))
    put("pnm_p6_100.ppm", pnm_raw(6, rgb.astype(np.uint32) * 100 // 255, 100))
    put("pnm_p6_4095.ppm", pnm_raw(6, wide % 4096, 4095))
    put("pnm_p1.pbm", pnm_plain(1, (grey < 128).astype(np.uint8)))
    put("pnm_p2.pgm", pnm_plain(2, grey.astype(np.uint32) * 3, 765))
    put("pnm_p3.ppm", pnm_plain(3, rgb.astype(np.uint32) // 2, 127))
    return made


def refused(out):
    """Variants stoker refuses, each with words of its reason: [(name, path, words)].
    Pillow refuses them too, or misreads them."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    w, h = 9, 7
    grey = np.arange(w * h, dtype=np.uint8).reshape(h, w)
    a = np.full((h, w), 128, np.uint8)
    files = {
        # Pillow: "conversion from La to L not supported"
        "tiff_la_premultiplied.tif": (tiff_bytes(w, h, 1, (8, 8), np.dstack([grey // 2, a]).tobytes(), extra=(1,)),
                                      "premultiplied"),
        "tiff_float.tif": (tiff_bytes(w, h, 1, (32,), grey.astype("<f4").tobytes(), sampleformat=3),
                           "floating-point"),
        "tiff_lab.tif": (tiff_bytes(w, h, 8, (8, 8, 8), np.dstack([grey] * 3).tobytes()), "photometric"),
        # Pillow: "Unsupported BMP pixel depth (2)"
        "bmp_2bit.bmp": (bmp_bytes(w, h, 2, [_pack_row(r % 4, 2) for r in grey], palette=[(0, 0, 0)] * 4),
                         "pixel depth"),
        # Pillow reads these pixels as 8-bit "L": garbage
        "bmp_grey_ramp4.bmp": (bmp_bytes(w, h, 4, [_pack_row(r % 16, 4) for r in grey],
                                         palette=[(i, i, i) for i in range(16)]), "grey palette"),
        "bmp_bitfields_101010.bmp": (bmp_bytes(w, h, 32, [b"\0" * 4 * w] * h, compression=3,
                                               masks=(0x3FF00000, 0xFFC00, 0x3FF)), "bit fields"),
        "bmp_png_inside.bmp": (bmp_bytes(w, h, 24, [b"\0" * 3 * w] * h, compression=5), "compression"),
    }
    made = []
    for name, (data, words) in files.items():
        (out / name).write_bytes(data)
        made.append((name, out / name, words))
    return made


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--side", type=int, nargs=2, metavar=("W", "H"))
    a = ap.parse_args()
    made = variants(a.out, a.side) + refused(a.out)
    print(f"{len(made)} files in {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
