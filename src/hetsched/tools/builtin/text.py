"""Text and I/O tools: a document merger (CPU implementation, and a GPU implementation that pays
the host-device copy), and the device-neutral tools: a fetch from a loopback HTTP server, PDF
text extraction, a regex chunker and JSON/regex record extraction.

Imports the tool API and the shared helpers; torch only inside the merger's GPU path.
"""

from __future__ import annotations

import http.server
import json
import re
import sys
import threading
import urllib.request
import zlib
from collections.abc import Sequence
from typing import Any, ClassVar

from hetsched.tools.base import Device, DeviceKind, Tool
from hetsched.tools.builtin.common import Shapes, Sized, corpus_text, strings_in, text_of, texts_of
from hetsched.tools.torch_model import stable_seed

_TAG = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")


def _shingles(text: str, n: int = 4) -> set[int]:
    words = text.lower().split()
    return {zlib.crc32(" ".join(words[i:i + n]).encode()) for i in range(max(1, len(words) - n + 1))}


class DocMerger(Sized, Tool):
    """Merges retrieved passages into one context document, dropping near-duplicates (Jaccard over
    word 4-shingles). The GPU implementation builds the passages' shingle bitmaps on the host,
    copies them to the device and computes all pairwise overlaps there: the copy dominates, so on a
    real GPU it is slower than the CPU path (the paper's CPU-preferred tool)."""

    name = "doc_merger"
    requires = ("torch",)
    summary = "Document merger ({size}): deduplicates and merges {passages} passages of {words} words"
    shapes: ClassVar[Shapes] = {
        "full": {"passages": 256, "words": 200, "buckets": 1 << 16, "threshold": 0.8},
        "tiny": {"passages": 48, "words": 80, "buckets": 1 << 14, "threshold": 0.8},
    }

    def load(self, device: Device) -> Any:
        return {"device": device}

    def _passages(self, inputs: Sequence[Any]) -> list[str]:
        return texts_of(inputs, self.shape["passages"], self.shape["words"], stable_seed(self.name))

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        device: Device = handle["device"]
        passages = self._passages(inputs)
        keep = self._keep_on_device(passages, device) if device.acts_as_gpu else self._keep_on_cpu(passages)
        kept = [p for p, k in zip(passages, keep, strict=True) if k]
        return f"Context ({len(kept)} of {len(passages)} passages)\n\n" + "\n\n".join(kept)

    def _keep_on_cpu(self, passages: list[str]) -> list[bool]:
        sets = [_shingles(p) for p in passages]
        kept: list[int] = []
        keep = [False] * len(passages)
        for i, s in enumerate(sets):
            if all(len(s & sets[j]) / max(1, len(s | sets[j])) < self.shape["threshold"] for j in kept):
                kept.append(i)
                keep[i] = True
        return keep

    def _keep_on_device(self, passages: list[str], device: Device) -> list[bool]:
        import torch

        buckets = self.shape["buckets"]
        bitmap = torch.zeros(len(passages), buckets, dtype=torch.float32)
        for i, p in enumerate(passages):
            idx = torch.tensor([h % buckets for h in _shingles(p)], dtype=torch.long)
            bitmap[i, idx] = 1.0
        # on the stand-in device, the host-device copy is a real copy into the device's memory
        m = bitmap.to(device.torch) if device.kind is DeviceKind.CUDA else bitmap.clone()
        with torch.inference_mode():
            inter = m @ m.T
            sizes = m.sum(1)
            jaccard = inter / (sizes[:, None] + sizes[None, :] - inter).clamp_min(1.0)
            dup = (jaccard >= self.shape["threshold"]).triu(diagonal=1).cpu()
        keep = [True] * len(passages)
        for i in range(len(passages)):  # greedy in order, as the CPU path: drop j if a kept i duplicates it
            if keep[i]:
                for j in dup[i].nonzero().flatten().tolist():
                    keep[j] = False
        return keep


# ---------------------------------------------------------------------------- device-neutral tools
class _Pages(http.server.BaseHTTPRequestHandler):
    """Serves ``/page/N``: a synthetic HTML page (its size set by the server's ``page_words``)."""

    def do_GET(self) -> None:
        m = re.fullmatch(r"/page/(\d+)", self.path)
        if not m:
            self.send_error(404)
            return
        words = self.server.page_words  # type: ignore[attr-defined]
        body = corpus_text(int(m[1]), words)
        paras = "".join(f"<p class='c'>{s.strip()}.</p>\n" for s in body.split(".") if s.strip())
        html = f"<html><head><title>Page {m[1]}</title></head><body><h1>Page {m[1]}</h1>\n{paras}</body></html>"
        data = html.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return


class _PageServer(http.server.ThreadingHTTPServer):
    """The loopback page server: a client that hangs up mid-request (a run cancelled or timed out) is
    its own business, not a traceback on the user's terminal; other errors are reported as usual."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class WebFetch(Sized, Tool):
    """Fetches pages from a loopback HTTP server (started by ``load``) and strips their markup.
    Network-bound and device-neutral: it has no GPU implementation."""

    name = "web_fetch"
    has_gpu = False
    summary = "Web fetch ({size}): fetches {pages} pages of {words} words from a loopback HTTP server and cleans them"
    shapes: ClassVar[Shapes] = {"full": {"pages": 4, "words": 20_000}, "tiny": {"pages": 4, "words": 2_000}}

    def load(self, device: Device) -> Any:
        server = _PageServer(("127.0.0.1", 0), _Pages)
        server.page_words = self.shape["words"]  # type: ignore[attr-defined]
        thread = threading.Thread(target=server.serve_forever, name="hetsched-web-fetch", daemon=True)
        thread.start()
        return {"server": server, "thread": thread, "calls": 0}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        host, port = handle["server"].server_address[:2]
        handle["calls"] += 1
        texts = []
        for i in range(self.shape["pages"]):
            url = f"http://{host}:{port}/page/{handle['calls'] * 100 + i}"
            with urllib.request.urlopen(url, timeout=30) as resp:
                html = resp.read().decode()
            texts.append(_SPACE.sub(" ", _TAG.sub(" ", html)).strip())
        return texts

    def unload(self, handle: Any) -> None:
        handle["server"].shutdown()
        handle["server"].server_close()
        handle["thread"].join(timeout=5)


def _pdf(pages: list[list[str]]) -> bytes:
    """A minimal valid PDF: one page object per page, each with a Flate-compressed content stream."""
    objs: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    for lines in pages:
        content = ["BT /F1 10 Tf 72 720 Td 12 TL"]
        for line in lines:
            safe = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            content.append(f"({safe}) Tj T*")
        content.append("ET")
        stream = zlib.compress("\n".join(content).encode("latin-1", "replace"))
        objs.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream")
        content_id = len(objs)
        objs.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                    b"/Resources << /Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> >> >> >>"
                    % content_id)
        kids.append(len(objs))
    objs[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (" ".join(f"{k} 0 R" for k in kids).encode(), len(kids))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    return bytes(out)


_STREAM = re.compile(rb"<<(?P<dict>[^>]*?)/Filter\s*/FlateDecode(?P<rest>[^>]*)>>\s*stream\r?\n", re.S)
_SHOW = re.compile(r"\((?P<s>(?:\\.|[^\\)])*)\)\s*Tj")


class PdfParse(Sized, Tool):
    """Extracts the text of a PDF (built by ``load``: pages with compressed content streams): finds
    each stream, inflates it and reads its text-showing operators. Device-neutral."""

    name = "pdf_parse"
    has_gpu = False
    summary = "PDF text extraction ({size}): extracts the text of a {pages}-page PDF ({lines} lines a page)"
    shapes: ClassVar[Shapes] = {"full": {"pages": 10, "lines": 60}, "tiny": {"pages": 4, "lines": 40}}

    def load(self, device: Device) -> Any:
        s = self.shape
        pages = [[corpus_text(stable_seed(self.name, p, i), 12) for i in range(s["lines"])] for p in range(s["pages"])]
        return {"pdf": _pdf(pages)}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        data: bytes = handle["pdf"]
        texts = []
        for m in _STREAM.finditer(data):
            length = int(re.search(rb"/Length\s+(\d+)", m["dict"] + m["rest"])[1])  # type: ignore[index]
            raw = zlib.decompress(data[m.end(): m.end() + length]).decode("latin-1")
            page = [re.sub(r"\\(.)", r"\1", t["s"]) for t in _SHOW.finditer(raw)]
            texts.append("\n".join(page))
        return "\n\f".join(texts)


class TextChunker(Sized, Tool):
    """Splits a document (upstream text, padded or cut to a fixed length) into overlapping windows of
    tokens (regex word/punctuation tokens). Device-neutral."""

    name = "text_chunker"
    has_gpu = False
    summary = "Text chunker ({size}): splits a {words}-word document into {window}-token chunks overlapping {overlap}"
    shapes: ClassVar[Shapes] = {"full": {"words": 8192, "window": 512, "overlap": 64},
                                "tiny": {"words": 3000, "window": 128, "overlap": 16}}

    def load(self, device: Device) -> Any:
        return {"token": re.compile(r"\w+|[^\w\s]")}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        s = self.shape
        tokens = handle["token"].findall(text_of(inputs, s["words"], stable_seed(self.name)))
        step = s["window"] - s["overlap"]
        return [" ".join(tokens[i:i + s["window"]]) for i in range(0, max(1, len(tokens) - s["overlap"]), step)]


_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_AMOUNT = re.compile(r"\$\s?(\d+(?:,\d{3})*(?:\.\d{2})?)")


class JsonExtract(Sized, Tool):
    """Parses JSON records (a fixed batch, plus upstream strings as records) and extracts emails,
    dates and amounts with regular expressions. Device-neutral."""

    name = "json_extract"
    has_gpu = False
    summary = "JSON/regex extraction ({size}): parses {records} JSON records and extracts emails, dates and amounts"
    shapes: ClassVar[Shapes] = {"full": {"records": 5000}, "tiny": {"records": 600}}

    def load(self, device: Device) -> Any:
        lines = []
        for i in range(self.shape["records"]):
            rec = {"id": i, "from": f"user{i % 97}@example.org", "date": f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}",
                   "note": corpus_text(stable_seed(self.name, i), 16) + f" total ${(i * 37) % 5000}.{i % 100:02d}",
                   "tags": [f"t{i % 7}", f"t{i % 11}"]}
            lines.append(json.dumps(rec))
        return {"lines": lines}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        lines = handle["lines"] + [json.dumps({"note": s}) for s in strings_in(inputs)]
        found = []
        for line in lines:
            rec = json.loads(line)
            text = " ".join(str(v) for v in rec.values())
            emails = _EMAIL.findall(text)
            dates = ["-".join(d) for d in _DATE.findall(text)]
            amounts = [float(a.replace(",", "")) for a in _AMOUNT.findall(text)]
            if emails or dates or amounts:
                found.append(f"{rec.get('id', '-')}: {' '.join(emails)} {' '.join(dates)} {sum(amounts):.2f}")
        return found
