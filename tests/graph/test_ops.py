"""Every op of the registry against numpy, through tracing and the reference executor."""

from __future__ import annotations

import numpy as np
import pytest

import thrifty as th
from thrifty.errors import ShapeError, SpecError
from thrifty.graph.ir import TensorType
from thrifty.graph.ops import OPS, get_op, infer_type, matmul_shape, normalize_einsum
from thrifty.graph.verify import verify

RNG = np.random.default_rng(0)


def run(fn, *arrays):
    """Trace ``fn``, verify the graph, run the reference; also return numpy's own result."""
    names = [f"x{i}" for i in range(len(arrays))]
    prog = th.program(eval(f"lambda {', '.join(names)}: fn({', '.join(names)})", {"fn": fn}))
    verify(prog.trace(*arrays))
    return prog(*arrays), fn(*arrays)


BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
}
SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 1, 4), (3, 1)), ((), (2, 2)),
          ((0, 3), (3,))]


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_binary_broadcasting(op, shapes):
    a, b = (RNG.standard_normal(s) + 2.5 for s in shapes)
    got, want = run(BINARY[op], a, b)
    assert got.shape == np.shape(want) and got.dtype == np.asarray(want).dtype
    np.testing.assert_array_equal(got, want)


NUMPY_UNARY = {"neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log,
               "sqrt": np.sqrt, "tanh": np.tanh,
               "relu": lambda x: np.maximum(x, 0),
               "sigmoid": lambda x: 1 / (1 + np.exp(-x))}
TH_UNARY = {"neg": lambda x: -x, "abs": th.abs, "exp": th.exp, "log": th.log, "sqrt": th.sqrt,
            "tanh": th.tanh, "relu": th.relu, "sigmoid": th.sigmoid}


@pytest.mark.parametrize("op", sorted(TH_UNARY))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_unary(op, dtype):
    x = (RNG.standard_normal((4, 5)) * 3).astype(dtype)
    if op in ("log", "sqrt"):
        x = np.abs(x) + 0.1
    got, _ = run(TH_UNARY[op], x)
    want = NUMPY_UNARY[op](x)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == "float32" else 1e-14)


def test_sigmoid_is_stable_for_large_inputs():
    x = np.array([-1000.0, -40.0, 0.0, 40.0, 1000.0])
    got, _ = run(th.sigmoid, x)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, [0.0, np.exp(-40) / (1 + np.exp(-40)), 0.5,
                                     1 / (1 + np.exp(-40)), 1.0])


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)),
                                   ((4,), (4,)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                                   ((0, 4), (4, 3)), ((3, 0), (0, 2))], ids=str)
def test_matmul_shapes(sa, sb):
    a, b = RNG.standard_normal(sa), RNG.standard_normal(sb)
    got, want = run(lambda x, y: x @ y, a, b)
    assert matmul_shape(sa, sb) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("sa,sb", [((3, 4), (3, 4)), ((4,), (5,)), ((2, 3, 4), (3, 4, 5)),
                                   ((), (3,))])
def test_matmul_mismatch_names_op_and_shapes(sa, sb):
    with pytest.raises(ShapeError, match=r"matmul.*" + r"\(.*\).*\(.*\)"):
        th.program(lambda a, b: a @ b).trace(a=(sa, "float64"), b=(sb, "float64"))


EINSUMS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]), ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]), ("ij->", [(3, 4)]), ("ij->ji", [(3, 4)]), ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]), ("...ij->...ji", [(2, 3, 4)]),
    ("ij...,jk...->ik...", [(3, 4, 2), (4, 5, 2)]), ("ijk,jil->kl", [(3, 4, 5), (4, 3, 2)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("ba", [(3, 4)]), ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("i,i,i->i", [(4,), (4,), (4,)]), ("...", [(2, 3)]), ("ij,ij->ij", [(1, 4), (3, 4)]),
]


@pytest.mark.parametrize("subs,shapes", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum_matches_numpy(subs, shapes):
    ops = [RNG.standard_normal(s) for s in shapes]
    got, _ = run(lambda *xs: th.einsum(subs, *xs), *ops)
    want = np.einsum(subs, *ops)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    norm, _ = normalize_einsum(subs, shapes)
    assert "..." not in norm and "->" in norm


@pytest.mark.parametrize("subs,shapes,msg", [
    ("ij,jk->ik", [(3, 4), (5, 6)], "label 'j' has size 4"),
    ("ij,jk->ik", [(3, 4)], "names 2 operands"),
    ("ij->k", [(3, 4)], "appear in no input"),
    ("ij->ii", [(3, 3)], "repeats a label"),
    ("i1,j->ij", [(3, 4), (4,)], "invalid term"),
    ("ijk->i", [(3, 4)], "has 3 labels"),
])
def test_einsum_errors(subs, shapes, msg):
    with pytest.raises(ShapeError, match=msg):
        normalize_einsum(subs, shapes)


@pytest.mark.parametrize("red", ["sum", "max"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(red, axis, keepdims):
    x = RNG.standard_normal((3, 4, 5))
    fn = getattr(th, red)
    got, _ = run(lambda a: fn(a, axis=axis, keepdims=keepdims), x)
    want = getattr(np, red)(x, axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(got, want, rtol=1e-13)
    got2, _ = run(lambda a: getattr(a, red)(axis=axis, keepdims=keepdims), x)
    np.testing.assert_allclose(got2, want, rtol=1e-13)


def test_reduction_axis_out_of_range():
    with pytest.raises(ShapeError, match="axis 2 is out of range"):
        th.program(lambda x: x.sum(2)).trace(x=((3, 4), "float64"))


def test_transpose_forms():
    x = RNG.standard_normal((2, 3, 4))
    for fn, want in [(lambda a: a.T, x.T), (lambda a: a.transpose(1, 0, 2), x.transpose(1, 0, 2)),
                     (lambda a: th.transpose(a, (2, 0, 1)), x.transpose(2, 0, 1))]:
        got, _ = run(fn, x)
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ShapeError, match="not a permutation"):
        th.program(lambda a: a.transpose(0, 0, 1)).trace(a=x)


def test_where_and_scalars():
    x, y = RNG.standard_normal((3, 4)), RNG.standard_normal((4,))
    got, _ = run(lambda a, b: th.where(a > 0, a * 2.0 + 1, b - 3), x, y)
    np.testing.assert_array_equal(got, np.where(x > 0, x * 2.0 + 1, y - 3))


def test_scalar_promotion_follows_numpy():
    x = RNG.standard_normal((3,)).astype(np.float32)
    got, want = run(lambda a: 2.0 * a + 1, x)
    assert got.dtype == np.float32 == want.dtype
    i = np.arange(4)
    got, want = run(lambda a: a / 2, i)
    assert got.dtype == want.dtype == np.float64


def test_softmax_plain_and_masked():
    x = RNG.standard_normal((4, 6))
    mask = RNG.random((4, 6)) < 0.5
    mask[2] = False
    got, _ = run(lambda a: th.softmax(a, axis=1), x)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-14)
    gm, _ = run(lambda a, m: th.softmax(a, axis=-1, mask=m), x, mask)
    assert np.all(gm[~mask] == 0) and np.all(gm[2] == 0)
    rows = mask.any(1)
    np.testing.assert_allclose(gm[rows].sum(1), 1.0)
    for r in np.flatnonzero(rows):
        v = x[r, mask[r]]
        np.testing.assert_allclose(gm[r, mask[r]], np.exp(v - v.max()) / np.exp(v - v.max()).sum())


def test_softmax_mask_shape_error():
    with pytest.raises(ShapeError, match="mask shape"):
        th.program(lambda a, m: th.softmax(a, axis=1, mask=m)).trace(
            a=((4, 6), "float64"), m=((5, 6), "bool"))


def test_every_registered_op_has_the_three_rules():
    assert {"matmul", "add", "einsum", "softmax", "where", "sum", "max"} <= set(OPS)
    for op in OPS.values():
        assert callable(op.infer) and callable(op.flops) and callable(op.reference)


def test_unknown_op_and_attribute_say_what_is_valid():
    with pytest.raises(SpecError, match="unknown op 'conv'.*valid ops are.*matmul"):
        get_op("conv")
    with pytest.raises(SpecError, match=r"unknown attribute.*'axs'.*valid attributes.*axis"):
        infer_type("sum", [TensorType((3,), "float64")], {"axs": 0, "axis": (0,),
                                                         "keepdims": False})


def test_flops():
    g = th.program(lambda a, b: (a @ b).sum()).trace(a=((3, 4), "float64"), b=((4, 5), "float64"))
    mm = next(n for n in g if n.op == "matmul")
    assert OPS["matmul"].flops([g[i].type for i in mm.inputs], mm.type, mm.attrs) == 2 * 3 * 4 * 5


def test_bad_dtype_for_op():
    with pytest.raises(SpecError, match="neg is not defined for dtypes"):
        th.program(lambda a: -a).trace(a=((3,), "bool"))
