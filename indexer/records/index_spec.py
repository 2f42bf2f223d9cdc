"""FAISS factory strings (`index.spec`), parsed in one place into an `IndexSpec`: what each
part is, what it costs per vector, which search parameter it takes, whether it can remove ids.

Accepted (comma-separated, in this order; FAISS's `index_factory` builds the index):
`[IDMap|IDMap2,] [transform,]* body [,refine]` where
- transform: `OPQm[_d]`, `PCA[R][W]d`, `RRd`, `L2norm`;
- body: `codes` (an exact or flat-coded index), `HNSWm[_codes]` or `HNSWm,codes` (a graph,
  m default 32), or `IVFn[_HNSWm|_Flat],codes` (n inverted lists over a coarse quantizer);
- codes: `Flat`, `PQm[xb][fs|np]` (m sub-quantisers of b bits, default 8; `fs` SIMD fast
  scan), `SQ4|SQ6|SQ8|SQfp16|SQbf16`;
- refine: `RFlat` (rescore with full vectors) or `Refine(codes)`.
Does not build indexes (`indexer.index.vector`) or choose specs (`indexer.index.auto`).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

from indexer.errors import VectorIndexError

ACCEPTED_FORMS = (
    "`Flat`; `HNSW32`; `HNSW32_SQ8`; `IVF1024,Flat`; `IVF1024_HNSW32,PQ32`; "
    "`OPQ16_64,IVF4096,PQ16x4fs,RFlat`; `IVF4096,PQ192x4fs,Refine(SQ8)` (in general "
    "`[IDMap2,][OPQm[_d]|PCAd|RRd|L2norm,]... Flat|PQm[xb][fs]|SQ4|SQ6|SQ8|SQfp16 | "
    "HNSWm[_codes] | IVFn[_HNSWm],codes [,RFlat|,Refine(codes)]`)"
)

_CODES = r"Flat|PQ(?P<m>\d+)(?:x(?P<bits>\d+))?(?P<suffix>fs|np)?|SQ(?P<sq>4|6|8|fp16|bf16)"
_CODES_RE = re.compile(rf"(?:{_CODES})")
_TRANSFORM_RE = re.compile(
    r"OPQ(?P<m>\d+)(?:_(?P<d>\d+))?|PCAR?W?(?P<pca>\d+)|RR(?P<rr>\d+)"
    r"|L2norm"
)
_IVF_RE = re.compile(r"IVF(?P<n>\d+)(?:_(?P<q>HNSW(?P<qm>\d*)|Flat))?")
_HNSW_RE = re.compile(r"HNSW(?P<m>\d*)(?:_(?P<codes>.+))?")
_REFINE_RE = re.compile(r"RFlat|Refine\((?P<codes>[^()]+)\)")
HNSW_DEFAULT_M = 32  # FAISS's M for a bare `HNSW`


@dataclass(frozen=True)
class Codes:
    """How a vector is stored: `Flat` (float32), `PQ` (m codes of `bits` bits), `SQ` (`bits`
    per dimension)."""

    kind: str  # "Flat", "PQ" or "SQ"
    m: int = 0  # PQ sub-quantisers
    bits: int = 32  # PQ: bits per sub-quantiser; SQ: bits per dimension; Flat: 32
    fast_scan: bool = False  # PQ `fs`: SIMD fast-scan layout

    def bytes_per_vector(self, dim: int) -> float:
        """Bytes one vector's codes take.

        Args:
            dim: the dimension the codes are taken over.
        Returns:
            4·dim (Flat), ⌈m·bits/8⌉ (PQ), ⌈dim·bits/8⌉ (SQ).
        """
        if self.kind == "PQ":
            return math.ceil(self.m * self.bits / 8)
        return math.ceil(dim * self.bits / 8)


@dataclass(frozen=True)
class IndexSpec:
    """A parsed FAISS factory string.

    Attributes:
        text: the string as given.
        id_map: it starts with `IDMap`/`IDMap2` (ids held by the wrapper).
        transforms: pre-transforms in order, e.g. ("OPQ16_64",).
        transform_dim: the dimension the last transform outputs (None: unchanged).
        nlist: IVF inverted lists (None: not IVF).
        quantizer_m: links per node of the IVF coarse quantizer's HNSW graph (`IVFn_HNSWm`);
            None: a flat quantizer, or not IVF.
        hnsw_m: links per node of an HNSW graph index (None: not HNSW).
        codes: the vectors' codes in the index body.
        refine: the rescoring codes of an `RFlat` (Flat) or `Refine(X)` stage, else None.
    """

    text: str
    id_map: bool
    transforms: tuple[str, ...]
    transform_dim: int | None
    nlist: int | None
    quantizer_m: int | None
    hnsw_m: int | None
    codes: Codes
    refine: Codes | None

    @property
    def quantizer(self) -> str | None:
        """The IVF coarse quantizer: `Flat` or e.g. `HNSW32`; None when not IVF."""
        if self.nlist is None:
            return None
        return "Flat" if self.quantizer_m is None else f"HNSW{self.quantizer_m}"

    @property
    def search_param(self) -> str | None:
        """`nprobe` (IVF), `efSearch` (HNSW), or None (exhaustive search)."""
        if self.nlist is not None:
            return "nprobe"
        if self.hnsw_m is not None:
            return "efSearch"
        return None

    @property
    def removes_ids(self) -> bool:
        """Whether FAISS's `remove_ids` can work on it: not an HNSW graph, not under a
        rescoring stage (`IndexRefine`); others record deletions (`VectorIndex.remove`)."""
        return self.hnsw_m is None and self.refine is None

    @property
    def needs_id_map(self) -> bool:
        """Whether it needs an `IDMap2` wrapper to hold chunk ids: all but IVF indexes
        without a rescoring stage (IVF lists store ids; `IndexRefine` cannot take them)."""
        return not self.id_map and (self.nlist is None or self.refine is not None)

    @property
    def gpu_buildable(self) -> bool:
        """Whether it is trained and filled on GPUs: a plain IVF index (no pre-transform,
        no IDMap, no fast-scan codes)."""
        return (
            self.nlist is not None
            and not self.transforms
            and not self.needs_id_map
            and not self.codes.fast_scan
        )

    def code_dim(self, dim: int) -> int:
        """The dimension the index body works in, for input vectors of `dim`."""
        return self.transform_dim or dim


@functools.lru_cache(maxsize=256)
def parse_spec(text: str) -> IndexSpec:
    """Parse a FAISS factory string (grammar in the module docstring).

    Args:
        text: e.g. `IVF1024_HNSW32,PQ32` (not `auto`: `indexer.index.vector.resolve_spec`).
    Returns:
        The IndexSpec.
    Raises:
        VectorIndexError: not a form this project reads; the message names the spec, the
            part not understood and the accepted forms.
    """
    parts = _split(text)
    pos = 0
    id_map = bool(parts) and parts[0] in ("IDMap", "IDMap2")
    pos += id_map
    transforms: list[str] = []
    transform_dim = None
    while pos < len(parts) and (t := _TRANSFORM_RE.fullmatch(parts[pos])):
        transforms.append(parts[pos])
        out = t["d"] or t["pca"] or t["rr"]
        transform_dim = int(out) if out else transform_dim
        pos += 1
    if pos >= len(parts):
        raise _error(text, "no index body after the transforms")
    body = parts[pos]
    pos += 1
    nlist = quantizer_m = hnsw_m = None
    if ivf := _IVF_RE.fullmatch(body):
        nlist = int(ivf["n"])
        if ivf["q"] not in (None, "Flat"):
            quantizer_m = int(ivf["qm"] or HNSW_DEFAULT_M)
        if pos >= len(parts):
            raise _error(text, f"'{body}' needs codes after it, e.g. '{body},Flat'")
        codes = _codes(text, parts[pos])
        pos += 1
    elif hnsw := _HNSW_RE.fullmatch(body):
        hnsw_m = int(hnsw["m"] or HNSW_DEFAULT_M)
        if hnsw["codes"]:
            codes = _codes(text, hnsw["codes"])
        elif pos < len(parts) and _CODES_RE.fullmatch(parts[pos]):
            codes = _codes(text, parts[pos])
            pos += 1
        else:
            codes = Codes("Flat")
    else:
        codes = _codes(text, body)
    refine = None
    if pos < len(parts):
        if not (r := _REFINE_RE.fullmatch(parts[pos])):
            stages = "RFlat, Refine(SQfp16), Refine(SQ8)"
            raise _error(text, f"'{parts[pos]}' is not a rescoring stage ({stages})")
        refine = Codes("Flat") if r["codes"] is None else _codes(text, r["codes"])
        pos += 1
    if pos < len(parts):
        raise _error(text, f"'{','.join(parts[pos:])}' after the last stage")
    return IndexSpec(
        text, id_map, tuple(transforms), transform_dim, nlist, quantizer_m, hnsw_m, codes, refine
    )


def _split(text: str) -> list[str]:
    """Comma-separated parts, commas inside parentheses kept."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _codes(text: str, part: str) -> Codes:
    found = _CODES_RE.fullmatch(part)
    if found is None:
        raise _error(text, f"'{part}' is not a code (Flat, PQm[xb][fs], SQ8, ...)")
    if part == "Flat":
        return Codes("Flat")
    if found["m"] is not None:
        return Codes("PQ", int(found["m"]), int(found["bits"] or 8), found["suffix"] == "fs")
    sq = found["sq"]
    return Codes("SQ", bits=16 if sq in ("fp16", "bf16") else int(sq))


def _error(text: str, what: str) -> VectorIndexError:
    return VectorIndexError(
        f"index.spec '{text}': {what}; accepted: `auto` or a FAISS "
        f"factory string such as {ACCEPTED_FORMS}"
    )
