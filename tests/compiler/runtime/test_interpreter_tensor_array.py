"""A TensorFlow-style tensor-array model with TVM's prelude, as TVM prints it, end to end.

tests/models/tensor_array.relay holds what `relay.prelude.Prelude` puts in front of a model
imported from TensorFlow: List/Option/Tree with @hd, @tl, @nth, @update, @map, @foldl, @foldr,
@concat, @rev, @length, @tmap, @size, ...; the dynamic-rank ADT `tensor_float32_t` (constructors
`tensor_nil_float32`, `tensor0_float32` ... `tensor6_float32`) with its take / expand_dims /
concatenate / tensor_array_{read,write,unstack_tensorN,scatter,split,concat,stack} functions; and
the fixed-shape ADTs `static_tensor_float32_<shape>_t` (`any` for a `?` dim, `scalar` for rank 0) with their
`tensor_constructor_*` / `tensor_array_*` / `tensor_get_data_*` functions. Its @main is a while
loop (a recursive let-bound closure) writing into two tensor arrays, then reads, stacks, gathers,
splits and concatenates, unstacks and scatters.

The file is in TVM's printed form: type definitions first, type calls with brackets even without
arguments (`List[static_tensor_float32_2_3_t[]]`), every match clause body in braces, `%N`
numbered across the whole module, `/* ty= */` after calls. Our printer writes it back byte for
byte, so its `ty=` comments are what InferType computes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import cli
from compiler.diagnostics import InputError
from compiler.ir.structural import structural_equal
from compiler.ir.types import ANY, FuncType, TensorType, TypeCall
from compiler.parser import astext, parse, parse_file
from compiler.runtime.interpreter import run_main

FIXTURE = Path(__file__).resolve().parents[2] / "models" / "tensor_array.relay"
TEXT = FIXTURE.read_text(encoding="utf-8")


def without_main(text: str) -> str:
    """The fixture's prelude: every definition but @main (defs are separated by a blank line)."""
    start = text.index("def @main(")
    end = text.index("\n\ndef @", start)
    return text[:start] + text[end + 2:]


PRELUDE = without_main(TEXT)


@pytest.fixture(scope="module")
def module():
    return parse_file(str(FIXTURE))


def inputs(indices=(2, 0, 1), lengths=(1, 1)) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "x": rng.standard_normal((3, 2, 3)).astype("float32"),
        "w": rng.standard_normal((2, 3)).astype("float32"),
        "lengths": np.array(lengths, "int32"),
        "indices": np.array(indices, "int32"),
    }


def static(shape: str) -> TypeCall:
    return TypeCall(f"static_tensor_float32_{shape}_t", ())


# -- text: parse, print, parse ----------------------------------------------------------------


def test_fixture_prints_back_byte_for_byte_with_its_ty_comments(module):
    assert astext(module, show_types=True) == TEXT


def test_fixture_round_trips_to_a_structurally_equal_module(module):
    assert structural_equal(parse(astext(module), "printed.relay"), module)


def test_type_call_without_arguments_is_printed_with_brackets_as_tvm_does(module):
    assert "def @tensor_array_read_float32_2_3(%tensor_array: List[static_tensor_float32_2_3_t[]], %x: int32)" \
        " -> static_tensor_float32_2_3_t[] {" in TEXT
    assert "tensor_float32_t[]" in astext(module)


def test_tensor_adt_keeps_its_nil_and_rank_constructors_with_dynamic_dims(module):
    data = module.type_definition("tensor_float32_t")
    assert [c.name for c in data.constructors] == ["tensor_nil_float32"] + [f"tensor{r}_float32" for r in range(7)]
    assert data.constructors[0].inputs == ()
    assert [c.inputs for c in data.constructors[1:]] == [(TensorType((ANY,) * r, "float32"),) for r in range(7)]
    static_field = module.type_definition("static_tensor_float32_any_2_3_t").constructors[1].inputs
    assert static_field == (TensorType((ANY, 2, 3), "float32"),)


def test_static_tensor_array_functions_have_tvm_signatures(module):
    assert module["tensor_array_stack_float32_2_3"].checked_type == FuncType(
        (TypeCall("List", (static("2_3"),)),), static("any_2_3")
    )
    split = module["tensor_array_split_float32_2_3"].checked_type
    assert split.arg_types[0] == TypeCall("List", (static("any_3"),)) and split.arg_types[1] == static("2_3")
    assert split.ret_type == TypeCall("List", (static("any_3"),))
    assert module["tensor_get_data_float32_any_2_3"].checked_type.ret_type == TensorType((ANY, 2, 3), "float32")


def test_main_results_keep_the_dynamic_dims_of_the_stacked_arrays(module):
    assert module.main.checked_type.ret_type.fields == (
        TensorType((ANY, 2, 3), "float32"),
        TensorType((2, 3), "float32"),
        TensorType((ANY, 3), "float32"),
        TensorType((ANY, ANY, ANY), "float32"),
        TensorType((ANY, 2, 3), "float32"),
        TensorType((), "int32"),
        TensorType((ANY,), "float32"),
    )


# -- running it ---------------------------------------------------------------------------------


@pytest.mark.parametrize("indices, lengths", [((2, 0, 1), (1, 1)), ((0, 1, 2), (2, 0)), ((1, 2, 0), (0, 2))])
def test_main_runs_in_the_interpreter_and_matches_numpy(module, indices, lengths):
    args = inputs(indices, lengths)
    x, w, idx = args["x"], args["w"], args["indices"]
    stacked, read, concat, scattered, gathered, length, sums = run_main(module, args)
    written = x * w  # the while loop writes x[i] * w at index i
    np.testing.assert_allclose(stacked, written, rtol=1e-6)
    np.testing.assert_allclose(read, written[1], rtol=1e-6)
    np.testing.assert_array_equal(concat, w)  # split by lengths, then concatenated again
    expected = np.empty_like(x)
    expected[idx] = x  # scatter: slot indices[i] gets the i-th unstacked element
    np.testing.assert_array_equal(scattered, expected)
    np.testing.assert_allclose(gathered, written[idx], rtol=1e-6)
    assert int(length) == 2  # unstacking a (2, 3) tensor gives two rows
    np.testing.assert_allclose(sums, written.sum(axis=(1, 2)), rtol=1e-5)  # the scalar tensor array


def test_cli_interpret_runs_the_fixture(tmp_path):
    args = inputs()
    with open(tmp_path / "in.npz", "wb") as stream:
        np.savez(stream, **args)
    command = ["interpret", str(FIXTURE), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz")]
    assert cli.main(command) == 0
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(out["out0"], args["x"] * args["w"], rtol=1e-6)
    assert out["out3"].shape == (3, 2, 3) and int(out["out5"]) == 2


def run_prelude(main: str, **named: np.ndarray):
    return run_main(parse(PRELUDE + "\n" + main, "prelude.relay"), named)


def test_prelude_list_functions_run_as_tvm_defines_them():
    x = np.array([1, 2, 3], "int32")
    out = run_prelude("""def @main(%x: Tensor[(3), int32]) {
  %0 = take(%x, 0);
  %1 = take(%x, 1);
  %2 = take(%x, 2);
  let %l = Cons(%0, Cons(%1, Cons(%2, Nil)));
  let %inc = fn (%v: int32) -> int32 { add(%v, 10) };
  let %sub = fn (%a: int32, %b: int32) -> int32 { subtract(%a, %b) };
  let %r = @rev(%l);
  (@sum(@map(%inc, %l)), @foldl(%sub, 100, %l), @foldr(%sub, 100, %l), @nth(%r, 0), @length(@concat(%l, %r)),
   @hd(@tl(@update(%l, 1, 7))), @sum(@concat(%l, %r)), @foldr1(%sub, %l))
}""", x=x)
    assert [int(v) for v in out] == [36, 94, -98, 3, 6, 7, 12, 2]


def test_prelude_tree_zip_filter_and_iterate():
    out = run_prelude("""def @main(%x: int32) {
  let %leaf = Rose(%x, Nil);
  let %t = Rose(%x, Cons(%leaf, Cons(Rose(%x, Cons(%leaf, Nil)), Nil)));
  let %double = fn (%v: int32) -> int32 { multiply(%v, 2) };
  let %big = fn (%v: int32) -> bool { greater(%v, 4) };
  let %l = Cons(%x, Cons(add(%x, 3), Nil));
  let %z = @zip(%l, @map(%double, %l));
  let %p = @hd(@tl(%z));
  let %bumped = @tmap(%double, %t);
  let %root = match (%bumped) { Rose(%v, _) => %v };
  (@size(%t), %root, %p.0, %p.1, @length(@filter(%big, %l)), @iterate(%double, 3)(%x))
}""", x=np.array(2, "int32"))
    assert [int(v) for v in out] == [4, 4, 5, 10, 1, 16]


def test_prelude_unfold_and_accumulating_maps():
    out = run_prelude("""def @main(%n: int32) {
  let %count = fn (%s: int32) -> Option[(int32, int32)] {
    if (greater(%s, 0)) { Some((subtract(%s, 1), %s)) } else { None }
  };
  let %step = fn (%acc: int32, %v: int32) -> (int32, int32) { (add(%acc, %v), multiply(%acc, %v)) };
  let %down = @unfoldr(%count, %n);
  let %up = @unfoldl(%count, %n);
  let %l = @map_accuml(%step, 1, %down);
  let %r = @map_accumr(%step, 1, %down);
  (@hd(%down), @hd(%up), %l.0, @hd(%l.1), %r.0, @hd(%r.1))
}""", n=np.array(3, "int32"))
    # unfoldr(3) = [3, 2, 1]; unfoldl reverses it. accuml over [3, 2, 1] from 1 gives outputs 3, 8, 6,
    # each consed in front (so 6 comes first); accumr runs from the right: 1 -> (2, 1), 2 -> (4, 4),
    # 3 -> (7, 12), and 12 is consed last.
    assert [int(v) for v in out] == [3, 1, 7, 6, 7, 12]


def test_dynamic_rank_tensor_array_splits_concatenates_takes_and_stacks_every_rank():
    v = np.arange(10, dtype="float32").reshape(5, 2)
    s = np.array([4, 3, 2, 1], "float32")
    h = np.array([7, 8], "float32").reshape(1, 1, 1, 1, 2, 1)
    out = run_prelude("""def @main(%v: Tensor[(5, 2), float32], %lengths: Tensor[(3), int32], %s: Tensor[(4), float32],
          %h: Tensor[(1, 1, 1, 1, 2, 1), float32]) {
  let %parts = @tensor_array_split_float32(@tensor_array_float32(3), tensor2_float32(%v), %lengths);
  let %back = match? (@tensor_array_concat_float32(%parts)) { tensor2_float32(%t) => %t };
  let %second = match? (@tensor_array_read_float32(%parts, 1)) { tensor2_float32(%t) => %t };
  let %elems = @tensor_array_unstack_tensor1_float32(%s);
  let %stacked = match? (@tensor_array_stack_float32(%elems)) { tensor1_float32(%t) => %t };
  let %rows = @tensor_array_unstack_tensor6_float32(%h);
  let %restacked = match? (@tensor_array_stack_float32(%rows)) { tensor6_float32(%t) => %t };
  let %taken = match? (@tensor_take_float32(tensor1_float32(%s), 1, 3)) { tensor1_float32(%t) => %t };
  (%back, %second, %stacked, %restacked, %taken, @length(%rows))
}""", v=v, lengths=np.array([2, 0, 3], "int32"), s=s, h=h)
    back, second, stacked, restacked, taken, length = out
    np.testing.assert_array_equal(back, v)
    assert second.shape == (0, 2)  # a zero length gives an empty piece
    np.testing.assert_array_equal(stacked, s)
    np.testing.assert_array_equal(restacked, h)
    np.testing.assert_array_equal(taken, s[1:3])
    assert int(length) == 1


# What TVM 0.9+ adds when it prints a module after InferType with spans: `/* ty=... span=... */`
# after params, literals and calls, type annotations on match pattern variables, and a nullary
# constructor bound to its own `%N`.
ANNOTATED = """#[version = "0.0.5"]
type List[A] {
  Cons(A, List[A]),
  Nil,
}

type static_tensor_float32_4_3_t {
  tensor_nil_float32_4_3,
  tensor_constructor_float32_4_3(Tensor[(4, 3), float32]),
}

def @hd[A](%xs5: List[A] /* ty=List[A] span=from_string:376:11 */) -> A {
  match? (%xs5) {
    Cons(%x6: A /* ty=A span=from_string:377:5 */, _) => {
      %x6
    },
  }
}

def @main(%image: Tensor[(1, 4, 3), uint8] /* ty=Tensor[(1, 4, 3), uint8] span=from_string:1462:16 */) {
  %0 = cast(%image, dtype="float32") /* ty=Tensor[(1, 4, 3), float32] span=from_string:413:51 */;
  %1 = @tensor_array_float32_4_3(1 /* ty=int32 span=from_string:412:42 */) /* ty=List[static_tensor_float32_4_3_t[]] span=from_string:414:49 */;
  %2 = take(%0, 0 /* ty=int32 */, axis=0) /* ty=Tensor[(4, 3), float32] */;
  %3 = tensor_constructor_float32_4_3(%2) /* ty=static_tensor_float32_4_3_t[] span=from_string:422:70 */;
  %4 = @tensor_array_write_float32_4_3(%1, 0 /* ty=int32 span=from_string:422:53 */, %3) /* ty=List[static_tensor_float32_4_3_t[]] */;
  %5 = @hd(%4) /* ty=static_tensor_float32_4_3_t[] */;
  @tensor_get_data_float32_4_3(%5) /* ty=Tensor[(4, 3), float32] span=from_string:425:21 */
}

def @tensor_array_float32_4_3(%x28: int32 /* ty=int32 span=from_string:10231:22 */) -> List[static_tensor_float32_4_3_t[]] {
  %16 = equal(%x28, 0 /* ty=int32 span=from_string:10227:24 */) /* ty=bool span=from_string:10228:7 */;
  if (%16) {
    Nil /* ty=List[static_tensor_float32_4_3_t[]] span=from_string:10229:5 */
  } else {
    %17 = subtract(%x28, 1 /* ty=int32 span=from_string:10231:29 */) /* ty=int32 span=from_string:10233:45 */;
    %18 = tensor_nil_float32_4_3 /* ty=static_tensor_float32_4_3_t[] span=from_string:10234:10 */;
    %19 = @tensor_array_float32_4_3(%17) /* ty=List[static_tensor_float32_4_3_t[]] span=from_string:10234:17 */;
    Cons(%18, %19) /* ty=List[static_tensor_float32_4_3_t[]] span=from_string:10231:5 */
  }
}

def @tensor_array_write_float32_4_3(%tensor_array216: List[static_tensor_float32_4_3_t[]] /* ty=List[static_tensor_float32_4_3_t[]] */, %x86: int32 /* ty=int32 */, %v16: static_tensor_float32_4_3_t[] /* ty=static_tensor_float32_4_3_t[] */) -> List[static_tensor_float32_4_3_t[]] {
  match? (%tensor_array216) {
    Cons(_, %rest6: List[static_tensor_float32_4_3_t[]] /* ty=List[static_tensor_float32_4_3_t[]] */) => {
      Cons(%v16, %rest6)
    },
  }
}

def @tensor_get_data_float32_4_3(%tensor87: static_tensor_float32_4_3_t[] /* ty=static_tensor_float32_4_3_t[] span=from_string:10743:11 */) -> Tensor[(4, 3), float32] {
  match? (%tensor87) {
    tensor_constructor_float32_4_3(%t109: Tensor[(4, 3), float32] /* ty=Tensor[(4, 3), float32] span=from_string:10744:5 */) => {
      %t109
    },
  }
}
"""


def test_tvm_annotations_on_params_literals_and_pattern_variables_are_read():
    mod = parse(ANNOTATED, "annotated.relay")
    image = np.arange(12, dtype="uint8").reshape(1, 4, 3)
    (out,) = run_main(mod, {"image": image})
    np.testing.assert_array_equal(out, image[0].astype("float32"))
    assert structural_equal(parse(astext(mod), "printed.relay"), mod)
    assert "    Cons(%x6: A, _) => {" in astext(mod)


# -- bad input: located errors, never a traceback -----------------------------------------------


def test_reading_past_the_end_of_a_tensor_array_is_a_located_error_in_tl():
    mod = parse(PRELUDE + """
def @main(%w: Tensor[(2, 3), float32]) {
  %0 = @tensor_array_float32_2_3(2);
  @tensor_get_data_float32_2_3(@tensor_array_read_float32_2_3(%0, 5))
}""", "read.relay")
    with pytest.raises(InputError, match="no clause of the match handles the value Nil") as info:
        run_main(mod, {"w": np.zeros((2, 3), "float32")})
    # @nth walks with @tl, which has no clause for Nil.
    tl = next(n for n, line in enumerate(PRELUDE.splitlines(), 1) if line.startswith("def @tl["))
    assert (info.value.line, info.value.column) == (tl + 1, 3)


def test_reading_an_unwritten_slot_names_the_nil_tensor_constructor():
    mod = parse(PRELUDE + """
def @main(%w: Tensor[(2, 3), float32]) {
  %0 = @tensor_array_float32_2_3(2);
  @tensor_get_data_float32_2_3(@tensor_array_read_float32_2_3(%0, 1))
}""", "unwritten.relay")
    with pytest.raises(InputError, match="handles the value tensor_nil_float32_2_3"):
        run_main(mod, {"w": np.zeros((2, 3), "float32")})


def test_writing_a_tensor_of_the_wrong_shape_is_a_located_type_error():
    from compiler.diagnostics import TypeCheckError

    with pytest.raises(TypeCheckError) as info:
        parse(PRELUDE + """
def @main(%v: Tensor[(3, 2), float32]) {
  %0 = @tensor_array_float32_2_3(2);
  @tensor_array_write_float32_2_3(%0, 0, tensor_constructor_float32_2_3(%v))
}""", "wrong.relay")
    assert (info.value.line, info.value.column) == (PRELUDE.count("\n") + 2, 11)  # the %v it is given
    assert "Tensor[(2, 3), float32]" in info.value.message and "Tensor[(3, 2), float32]" in info.value.message


# -- the command line: interpreter only, and compile says why -----------------------------------


def test_inspect_says_the_fixture_runs_in_the_interpreter_only(capsys):
    assert cli.main(["inspect", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert "compiles to AOT C: no, interpreter only:" in out
    assert "@tensor_array_stack_float32_2_3" in out


def test_compile_fails_with_one_located_error_at_the_first_tensor_array_constructor_of_main(tmp_path, capsys):
    # The while loop itself compiles (compiler/backend/aot_control.py); its tensor arrays do not.
    assert cli.main(["compile", str(FIXTURE), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip()
    line = TEXT[: TEXT.index("%14 = tensor_constructor_float32_2_3(%13)")].count("\n") + 1
    assert err == (
        f"{FIXTURE}:{line}:13: error: the AOT executor cannot compile algebraic data type constructors "
        "(`tensor_constructor_float32_2_3`); run it with relaycc interpret"
    )


def test_compile_of_a_main_that_only_calls_prelude_functions_names_the_helper(tmp_path, capsys):
    model = tmp_path / "read.relay"
    model.write_text(PRELUDE + """
def @main(%w: Tensor[(2, 3), float32]) {
  %0 = @tensor_array_float32_2_3(2);
  @tensor_get_data_float32_2_3(@tensor_array_read_float32_2_3(%0, 0))
}
""", encoding="utf-8")
    assert cli.main(["compile", str(model), "-o", str(tmp_path / "out")]) == 1
    (err,) = capsys.readouterr().err.strip().splitlines()
    hd = next(n for n, line in enumerate(PRELUDE.splitlines(), 1) if line.startswith("def @hd["))
    assert err == (
        f"{model}:{hd + 1}:3: error: the AOT executor cannot compile match expressions (in @hd, reached from @main);"
        " run it with relaycc interpret"
    )
