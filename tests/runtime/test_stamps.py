"""Stamps of inputs (``thrifty.runtime.stamps``): chunked CRC-32s computed on two threads
equal ``zlib.crc32`` of each chunk, and any change of a value's bytes changes its stamp."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from thrifty.runtime import stamps


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 64 bytes: small values spread over many chunks and both threads."""
    monkeypatch.setattr(stamps, "CHUNK", 64)
    return 64


def _oracle(a: np.ndarray, chunk: int) -> tuple[int, ...]:
    raw = np.ascontiguousarray(a).tobytes()
    if len(raw) <= chunk:
        return (zlib.crc32(raw),)
    return tuple(zlib.crc32(raw[i:i + chunk]) for i in range(0, len(raw), chunk))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 400), seed=st.integers(0, 2**32 - 1), flip=st.integers(0, 10**6))
def test_chunked_stamps_equal_zlib_per_chunk_and_see_every_byte(n, seed, flip):
    chunk = 64
    old, stamps.CHUNK = stamps.CHUNK, chunk
    try:
        x = np.random.default_rng(seed).standard_normal(n)
        s = stamps.stamp(x)
        assert s[-1] == _oracle(x, chunk)                         # zlib, chunk by chunk
        assert stamps.chunk_crcs(memoryview(x.tobytes()), chunk) == _oracle(x, chunk)
        assert stamps.stamp(x) == s                               # deterministic
        if n:
            raw = x.view(np.uint8)
            raw[flip % raw.size] ^= 1 << (flip % 8)                # one bit, anywhere
            assert stamps.stamp(x) != s
    finally:
        stamps.CHUNK = old


def test_sparse_and_strided_values(small_chunks):
    A = sp.random_array((300, 200), density=0.05, format="csr", rng=0)
    s = stamps.stamp(A)
    assert s[:2] == (type(A), A.shape)
    for a, got in zip((A.data, A.indices, A.indptr), (s[5], s[9], s[13])):
        assert got == _oracle(a, small_chunks)
    A.indices[-1] = (A.indices[-1] + 1) % A.shape[1]               # the last chunk
    assert stamps.stamp(A) != s
    X = np.arange(600.0).reshape(30, 20)
    view = X[:, ::3]                                              # not contiguous
    assert stamps.stamp(view)[-1] == _oracle(view, small_chunks)
    t = stamps.stamp(view)
    X[29, 18] += 1.0
    assert stamps.stamp(view) != t
    assert stamps.stamp(np.zeros((0, 3)))[-1] == (zlib.crc32(b""),)


def test_a_chunk_must_be_positive():
    with pytest.raises(ValueError, match="chunk must be a positive number of bytes"):
        stamps.chunk_crcs(memoryview(b"abc"), 0)
