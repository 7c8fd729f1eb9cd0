"""Convolution layout assignment: each convolution runs in the layout its device prefers.

A device declares the convolution layout its kernels run fastest in (:class:`ConvLayout`,
``Capabilities.conv_layout``). A convolution whose dimension numbers differ is rewritten
to the preferred ones: its operands are transposed into the preferred layout and its
result stays in it. The transpose back to the program's layout is inserted only where a
consumer needs it, so layouts propagate like XLA's layout assignment or TVM's
ConvertLayout:

* every value is tracked as ``(node, perm)``: the new node holds the program's value
  transposed by ``perm`` (``new.shape[i] == old.shape[perm[i]]``);
* elementwise ops, ``reduce``, ``reduce_window``, ``slice``, ``pad``, ``concatenate``,
  ``reverse``, reshapes that only split and merge dims the layout keeps together and in
  order, and transposes run in their operand's layout (their dims and attributes
  permuted), so a chain conv -> batch norm -> relu -> conv -> pool -> residual add stays
  in the preferred layout between convolutions and an NCHW ResNet on an NHWC device has
  transposes only at its input and output;
* anything else (dots, other reshapes, the results) reads the program's layout through
  one transpose per value, shared by all its readers;
* a transpose is folded where it is free: into a transpose under it (composed), a
  constant (transposed once, at compile time), a broadcast (its dims renumbered), an
  elementwise op of such values (computed in the new layout) or a reshape (when it only
  moves unit dims).

Whether a convolution moves at all is a cost decision in bytes moved (:func:`_repaid`):
the transposes the preferred layout costs against those the program's costs plus the
convolution run outside the preferred layout. An input gradient reads the forward
convolution's copy of the weights, reversed (:func:`_reverse`, :func:`_kernel_as_it_is`).
A rewritten convolution the device would refuse (its capability predicate) is left as it
was. Results agree with the interpreter within the convolution's summation tolerance only
(another layout may sum in another order), like the dot layout rewrite: the pass is
switchable by name (``--disable_passes=layout``)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import BackendError
from ..ir.conv import REDUCE_WINDOW_ATTRS
from ..ir.literal import Literal
from ..ir.module import Computation, Node
from ..ir.ops import Op
from ..ir.types import TensorType
from .rewrite import like, map_called

Perm = tuple[int, ...]

#: role letters of each operand's layout string: S stands for all spatial dims, in order
_ROLES = {"lhs": "NCS", "rhs": "OIS", "out": "NCS"}
#: the dimension-number attributes of each role, per operand
_DIMS = {
    "lhs": {"N": "input_batch_dimension", "C": "input_feature_dimension", "S": "input_spatial_dimensions"},
    "rhs": {"O": "kernel_output_feature_dimension", "I": "kernel_input_feature_dimension",
            "S": "kernel_spatial_dimensions"},
    "out": {"N": "output_batch_dimension", "C": "output_feature_dimension", "S": "output_spatial_dimensions"},
}


@dataclass(frozen=True)
class ConvLayout:
    """The convolution layout a device's kernels run fastest in (``Capabilities.conv_layout``).

    Each field spells one operand's layout with role letters, independent of the number of
    spatial dims: ``lhs`` and ``out`` with N (batch), C (feature) and S (the spatial dims,
    in order); ``rhs`` with O (output feature), I (input feature) and S. ``"NSC"`` is NHWC
    (NWC, NDHWC), ``"NCS"`` NCHW, ``"SIO"`` HWIO, ``"OIS"`` OIHW. None keeps the layout the
    program wrote for that operand (e.g. weights that arrive as parameters in the user's
    layout, which a transpose would copy on every call).

    ``kernel_copy_min_pixels``: the price of a copy, in multiply-adds run outside the
    preferred layout per element copied (0: copies are free, every convolution moves). A
    kernel that the rewrite would transpose on every call (not a constant, whose transpose
    folds at compile time) is then copied only for a convolution with at least this many
    output pixels (batch x spatial positions), which repay the copy of each weight with
    that many multiply-adds in the faster layout; a smaller one keeps the program's layout
    (e.g. the 7x7 maps of a batch-1 ResNet, whose weights are large). The same price
    weighs the activations a layout would transpose (the module docstring)."""

    lhs: str | None = None
    rhs: str | None = None
    out: str | None = None
    kernel_copy_min_pixels: int = 0

    def __post_init__(self) -> None:
        for side, roles in _ROLES.items():
            v = getattr(self, side)
            if v is not None and sorted(v) != sorted(roles):
                raise BackendError(f"ConvLayout.{side}={v!r} must spell each of {', '.join(roles)} once "
                                   f"(S: the spatial dims), e.g. {roles!r}")

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.lhs, self.rhs, self.out))


def inverse(perm: Sequence[int]) -> Perm:
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return tuple(out)


def _identity(rank: int) -> Perm:
    return tuple(range(rank))


def preferred_perm(conv: Node, side: str, spelled: str | None) -> Perm:
    """The permutation that takes ``conv``'s ``side`` operand (or result) from its dimension
    numbers to the layout ``spelled`` (identity when None): the program's dims, in the
    preferred order."""
    rank = len(conv.operands[0].shape)
    if spelled is None:
        return _identity(rank)
    names = _DIMS[side]
    out: list[int] = []
    for role in spelled:
        v = conv.attr[names[role]]
        out.extend(v if isinstance(v, tuple) else (v,))
    return tuple(out)


def relaid_convolution(conv: Node, lhs: Node, rhs: Node, perms: dict[str, Perm]) -> Node:
    """``conv`` over operands already in the layouts ``perms["lhs"]``/``["rhs"]``, producing
    its result in ``perms["out"]``: only the dimension numbers change."""
    attrs = dict(conv.attr)
    for side, names in _DIMS.items():
        where = inverse(perms[side])  # program dim -> its position in the new layout
        for name in names.values():
            v = conv.attr[name]
            attrs[name] = tuple(where[d] for d in v) if isinstance(v, tuple) else where[v]
    return like(conv, Op.CONVOLUTION, [lhs, rhs], **attrs)


def _moves_unit_dims_only(shape: Sequence[int], perm: Perm) -> bool:
    """True when ``perm`` keeps the order of the dims larger than 1 (a reshape then does it)."""
    big = [p for p in perm if shape[p] != 1]
    return big == sorted(big)


class _Relayout:
    """One pass over one computation (and, through control ops, the ones it calls)."""

    def __init__(self, pref: ConvLayout, claims: Callable[[Node], bool] | None) -> None:
        self.pref = pref
        self.claims = claims
        self.changed = False

    # -- transposes, folded where free ---------------------------------------------
    def transposed(self, x: Node, perm: Perm, memo: dict[tuple[int, Perm], Node]) -> Node:
        """``transpose(x, perm)``, folded into ``x`` where that costs nothing."""
        if perm == _identity(len(perm)):
            return x
        key = (x.uid, perm)
        if key not in memo:
            memo[key] = self._fold(x, perm, memo)
        return memo[key]

    def _fold(self, x: Node, perm: Perm, memo: dict[tuple[int, Perm], Node]) -> Node:
        shape = tuple(x.shape[p] for p in perm)
        if x.op is Op.TRANSPOSE:
            inner = x.attr["permutation"]
            return self.transposed(x.operands[0], tuple(inner[p] for p in perm), memo)
        if x.op is Op.CONSTANT:  # transposed once, here, instead of on every run
            value = np.ascontiguousarray(np.transpose(x.attr["value"].array, perm))
            return like(x, Op.CONSTANT, [], value=Literal(value))
        if x.op is Op.BROADCAST_IN_DIM:
            where = inverse(perm)
            dims = [where[d] for d in x.attr["broadcast_dimensions"]]
            order = tuple(sorted(range(len(dims)), key=dims.__getitem__))
            inner = self.transposed(x.operands[0], order, memo)
            return like(x, Op.BROADCAST_IN_DIM, [inner], shape=shape, broadcast_dimensions=tuple(sorted(dims)))
        if _is_elementwise(x) and not any(self.copies(o, perm, memo) for o in x.operands):
            # of broadcasts and constants (a pooling's gradient, say): computed in the layout
            return like(x, x.op, [self.transposed(o, perm, memo) for o in x.operands], **x.attr)
        if _moves_unit_dims_only(x.shape, perm):
            src = x.operands[0] if x.op is Op.RESHAPE else x
            return src if src.shape == shape else like(x, Op.RESHAPE, [src], shape=shape)
        return like(x, Op.TRANSPOSE, [x], permutation=perm)

    def copies(self, x: Node, perm: Perm, memo: dict[tuple[int, Perm], Node]) -> bool:
        """Whether ``transposed(x, perm)`` would add a transpose that is not there yet."""
        if perm == _identity(len(perm)) or (x.uid, perm) in memo:
            return False
        if x.op is Op.TRANSPOSE:
            inner = x.attr["permutation"]
            return self.copies(x.operands[0], tuple(inner[p] for p in perm), memo)
        if _is_elementwise(x) and not any(self.copies(o, perm, memo) for o in x.operands):
            return False
        return x.op not in (Op.CONSTANT, Op.BROADCAST_IN_DIM) and not _moves_unit_dims_only(x.shape, perm)

    # -- the traversal -------------------------------------------------------------
    def computation(self, comp: Computation) -> Computation:
        """``comp`` relaid out. Twice: which convolutions move decides where a layout
        conflict leans (:func:`_conv_bound`), so a first traversal in which every
        convolution attracts the device's layout finds them, and the second settles the
        conflicts toward the convolutions that actually moved."""
        moved: set[int] = set()
        self._traverse(comp, lambda conv: True, moved)
        return self._traverse(comp, lambda conv: conv.uid in moved, set())

    def _traverse(self, comp: Computation, moves: Callable[[Node], bool], moved: set[int]) -> Computation:
        s = _Scope(self, comp, moves, moved)
        for n in comp.nodes:
            if n.op is Op.PARAMETER:
                s.env[n.uid] = (n, _identity(len(n.shape)) if _is_tensor(n) else ())
                continue
            rule = _RULES.get(n.op) or (_elementwise if _is_elementwise(n) else None)
            out = rule(self, n, s) if rule is not None else None
            s.env[n.uid] = out if out is not None else (self._plain(n, s), _identity(_rank(n)))
        root, _ = s.env[comp.root.uid]
        if _is_tensor(comp.root):
            root = s.get(comp.root, _identity(len(comp.root.shape)))
        return comp if root is comp.root else comp.with_root(root)

    def _plain(self, n: Node, s: _Scope) -> Node:
        """``n`` reading its operands in the program's layout."""
        ops = tuple(s.get(o, _identity(_rank(o))) if _is_tensor(o) else s.env[o.uid][0] for o in n.operands)
        m = n if all(a is b for a, b in zip(ops, n.operands)) else n.replace(operands=ops)
        if m.traits.control:
            m = map_called(m, self.computation)
        return m


#: ops a layout passes through (their operand's layout is theirs): a value read through
#: them by a convolution is on its way to the device layout
_TRANSPARENT = frozenset({Op.REDUCE_WINDOW, Op.TRANSPOSE, Op.REVERSE, Op.SLICE, Op.PAD, Op.CONCATENATE,
                          Op.RESHAPE})


def _conv_bound(comp: Computation, moves: Callable[[Node], bool]) -> set[int]:
    """Uids of the values that reach an operand of a convolution that moves (``moves``)
    through elementwise ops and the ops that carry a layout only: there, a layout conflict
    is settled in favour of the device's layout (elsewhere, of the program's, so that a
    residual add between a stage that moved and one that did not does not flip to the
    device's layout for one 1x1 shortcut)."""
    users = comp.users
    bound: set[int] = set()
    for n in reversed(comp.nodes):
        if any((u.op is Op.CONVOLUTION and moves(u))
               or (u.uid in bound and (u.op in _TRANSPARENT or _is_elementwise(u))) for u in users[n.uid]):
            bound.add(n.uid)
    return bound


def _kernel_source(x: Node) -> Node:
    """The value a kernel operand is read from: through reverses and transposes, which read
    one copy of it in another layout (an input gradient's flipped kernel)."""
    while x.op in (Op.REVERSE, Op.TRANSPOSE):
        x = x.operands[0]
    return x


def _kernel_readers(comp: Computation) -> dict[int, int]:
    """How many convolutions read each value as their kernel (see :func:`_kernel_source`):
    a weight's copy serves the forward convolution and the input gradient's."""
    out: dict[int, int] = {}
    for n in comp.nodes:
        if n.op is Op.CONVOLUTION:
            uid = _kernel_source(n.operands[1]).uid
            out[uid] = out.get(uid, 0) + 1
    return out


def _after_conv(comp: Computation) -> set[int]:
    """Uids of the values computed from a convolution's result."""
    out: set[int] = set()
    for n in comp.nodes:
        if any(o.op is Op.CONVOLUTION or o.uid in out for o in n.operands):
            out.add(n.uid)
    return out


class _Scope:
    """The state of one computation's traversal: each value's new node and layout, the
    transposes made so far (shared by all readers) and the values bound for a convolution."""

    def __init__(self, r: _Relayout, comp: Computation, moves: Callable[[Node], bool], moved: set[int]) -> None:
        self.r = r
        self.env: dict[int, tuple[Node, Perm]] = {}
        self.memo: dict[tuple[int, Perm], Node] = {}
        self.users = comp.users
        self.kernel_readers = _kernel_readers(comp)
        self.bound = _conv_bound(comp, moves)
        self.after_conv = _after_conv(comp)
        #: uids of the program's convolutions that this traversal moved
        self.moved = moved

    def get(self, o: Node, perm: Perm) -> Node:
        """The program's value ``o`` laid out as ``perm``."""
        node, have = self.env[o.uid]
        return self.r.transposed(node, self._to(have, perm), self.memo)

    def copies(self, o: Node, perm: Perm) -> bool:
        """Whether reading ``o`` as ``perm`` adds a transpose."""
        node, have = self.env[o.uid]
        return self.r.copies(node, self._to(have, perm), self.memo)

    def copy_size(self, o: Node, perm: Perm) -> int:
        """Elements that reading ``o`` as ``perm`` transposes (0: none)."""
        return int(np.prod(o.shape)) if self.copies(o, perm) else 0

    def copied(self, o: Node) -> tuple[Node, Perm] | None:
        """A transposed copy of ``o`` (in the program's layout) made for another reader."""
        node = self.env[o.uid][0]
        perm = next((p for uid, p in self.memo if uid == node.uid), None)
        return None if perm is None else (self.memo[(node.uid, perm)], perm)

    @staticmethod
    def _to(have: Perm, want: Perm) -> Perm:
        return tuple(have.index(p) for p in want)


def _is_tensor(n: Node) -> bool:
    return isinstance(n.type, TensorType)


def _rank(n: Node) -> int:
    return len(n.shape) if _is_tensor(n) else 0


def _is_elementwise(n: Node) -> bool:
    return (n.traits.elementwise and not n.traits.side_effect and _is_tensor(n)
            and all(_is_tensor(o) and o.shape == n.shape for o in n.operands))


def _operand_perm(n: Node, s: _Scope) -> Perm | None:
    """The first non-program layout among ``n``'s operands (None: all in the program's)."""
    for o in n.operands:
        perm = s.env[o.uid][1]
        if perm != _identity(len(perm)):
            return perm
    return None


def _common_perm(n: Node, s: _Scope) -> Perm | None:
    """The layout, among its operands', that ``n`` (elementwise, or a concatenation) runs in:
    the one that adds the fewest transposes; on a tie, the device's where the value goes on
    to a convolution, else the program's (a weight update reads the weight gradient in the
    program's layout, and the weight and its momentum are not copied into another). None:
    the program's."""
    ident = _identity(len(n.shape))
    tensors = [o for o in n.operands if _is_tensor(o)]
    candidates = list(dict.fromkeys(s.env[o.uid][1] for o in tensors))
    if candidates == [ident]:
        return None
    cost = {p: sum(s.copies(o, p) for o in tensors) for p in candidates}
    least = min(cost.values())
    best = [p for p in candidates if cost[p] == least]
    moved = [p for p in best if p != ident]
    perm = moved[0] if moved and (n.uid in s.bound or ident not in best) else ident
    return None if perm == ident else perm


def _elementwise(r: _Relayout, n: Node, s: _Scope) -> tuple[Node, Perm] | None:
    """An elementwise op runs in its operands' layout (:func:`_common_perm`)."""
    perm = _common_perm(n, s)
    if perm is None:
        return None
    return like(n, n.op, [s.get(o, perm) for o in n.operands], **n.attr), perm


def _reduce(r: _Relayout, n: Node, s: _Scope) -> tuple[Node, Perm] | None:
    """A reduction over the same program dims, renumbered; the kept dims keep their order."""
    perm = _operand_perm(n, s)
    if perm is None:
        return None
    axes = n.attr["axes"]
    where = inverse(perm)
    kept = [p for p in perm if p not in axes]
    out_perm = tuple(p - sum(a < p for a in axes) for p in kept)
    m = like(n, Op.REDUCE, [s.get(n.operands[0], perm)], kind=n.attr["kind"],
             axes=tuple(sorted(where[a] for a in axes)))
    return m, out_perm


def _reduce_window(r: _Relayout, n: Node, s: _Scope) -> tuple[Node, Perm] | None:
    """A window per program dim, its attributes permuted with the dims."""
    perm = _operand_perm(n, s)
    if perm is None:
        return None
    attrs = dict(n.attr)
    for name in REDUCE_WINDOW_ATTRS:
        attrs[name] = tuple(n.attr[name][p] for p in perm)
    return like(n, Op.REDUCE_WINDOW, [s.get(n.operands[0], perm)], **attrs), perm


def _transpose(r: _Relayout, n: Node, s: _Scope) -> tuple[Node, Perm] | None:
    """A transpose of a relaid-out value is no op: its operand, in a layout of its result."""
    node, have = s.env[n.operands[0].uid]
    if have == _identity(len(have)):
        return None
    pt = n.attr["permutation"]
    return node, tuple(pt.index(p) for p in have)


def _slice(r: _Relayout, n: Node, s: _Scope) -> tuple[Node, Perm] | None:
    """A slice of each program dim, its bounds permuted with the dims."""
    perm = _operand_perm(n, s)
    if perm is None:
        return None
    attrs = {k: tuple(n.attr[k][p] for p in perm) for k in ("start", "limit", "stride")}
    return like(n, Op.SLICE, [s.get(n.operands[0], perm)], **attrs), perm


def _pad(r: _Relayout, n: Node, s: _Scope) -> tuple[Node, Perm] | None:
    """Padding of each program dim (the scalar padding value has no layout)."""
    x, value = n.operands
    perm = s.env[x.uid][1]
    if perm == _identity(len(perm)):
        return None
    attrs = {k: tuple(n.attr[k][p] for p in perm) for k in ("low", "high", "interior")}
    return like(n, Op.PAD, [s.get(x, perm), s.env[value.uid][0]], **attrs), perm


def _concatenate(r: _Relayout, n: Node, s: _Scope) -> tuple[Node, Perm] | None:
    """A concatenation in its operands' layout (:func:`_common_perm`), along the same
    program dim."""
    perm = _common_perm(n, s)
    if perm is None:
        return None
    return (like(n, Op.CONCATENATE, [s.get(o, perm) for o in n.operands],
                 dimension=inverse(perm)[n.attr["dimension"]]), perm)


def reshape_groups(src: Sequence[int], dst: Sequence[int]) -> list[tuple[list[int], list[int]]] | None:
    """A row-major reshape from ``src`` to ``dst`` as groups of consecutive dims, each group of
    ``src`` dims merged and split into its group of ``dst`` dims (trailing unit dims join
    the last group); None for an empty shape."""
    if 0 in src or not src or not dst:
        return None
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(src) and j < len(dst):
        gi, gj, pi, pj = [i], [j], src[i], dst[j]
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj:
                gi.append(i)
                pi, i = pi * src[i], i + 1
            else:
                gj.append(j)
                pj, j = pj * dst[j], j + 1
        groups.append((gi, gj))
    groups[-1][0].extend(range(i, len(src)))
    groups[-1][1].extend(range(j, len(dst)))
    return groups


def _reshape(r: _Relayout, n: Node, s: _Scope) -> tuple[Node, Perm] | None:
    """A reshape that only splits and merges dims the layout keeps together and in order
    (each group of merged dims moved as a whole): the same reshape of the moved groups."""
    x = n.operands[0]
    perm = s.env[x.uid][1]
    if perm == _identity(len(perm)):
        return None
    groups = reshape_groups(x.shape, n.shape)
    if groups is None:
        return None
    of = {d: g for g, (gi, _) in enumerate(groups) for d in gi}
    order: list[int] = []
    k = 0
    while k < len(perm):
        gi = groups[of[perm[k]]][0]
        if list(perm[k:k + len(gi)]) != gi:
            return None  # the layout splits or reorders a group: the program's layout
        order.append(of[perm[k]])
        k += len(gi)
    out_perm = tuple(d for g in order for d in groups[g][1])
    return like(n, Op.RESHAPE, [s.get(x, perm)], shape=tuple(n.shape[d] for d in out_perm)), out_perm


def _reverse(r: _Relayout, n: Node, s: _Scope) -> tuple[Node, Perm] | None:
    """A reverse in its operand's layout (its dims renumbered). A program-layout operand
    bound for a convolution (the flipped kernel of an input gradient) is read through the
    copy another reader made of it, the forward convolution's kernel: the weights are
    copied once per call, not once per direction."""
    x = n.operands[0]
    node, have = s.env[x.uid]
    if have == _identity(len(have)):
        found = s.copied(x) if n.uid in s.bound else None
        if found is None:
            return None
        node, have = found
    where = inverse(have)
    return like(n, Op.REVERSE, [node], dimensions=tuple(sorted(where[d] for d in n.attr["dimensions"]))), have


def _convolution(r: _Relayout, n: Node, s: _Scope) -> tuple[Node, Perm] | None:
    """A convolution in the preferred layout, when the device claims it there and the
    transposes it costs are repaid (:func:`_repaid`)."""
    perms = {side: preferred_perm(n, side, getattr(r.pref, side)) for side in _DIMS}
    if all(p == _identity(len(p)) for p in perms.values()):
        return None
    perms["rhs"] = _kernel_as_it_is(r, n, s, perms["rhs"])
    if not _repaid(r, n, s, perms):
        return None
    m = relaid_convolution(n, s.get(n.operands[0], perms["lhs"]), s.get(n.operands[1], perms["rhs"]), perms)
    if r.claims is not None and not r.claims(m):
        return None
    r.changed = True
    s.moved.add(n.uid)
    return m, perms["out"]


def _kernel_as_it_is(r: _Relayout, n: Node, s: _Scope, want: Perm) -> Perm:
    """The kernel's layout: the preferred one, or the preferred one with O and I traded when
    the kernel is already laid out so. An input gradient's kernel is the forward kernel
    reversed with O and I trading roles: it reads the forward convolution's copy of the
    weights (HWIO) as HWOI instead of copying the weights a second time (cpu, batch 32: at
    most 12% slower for 512x512 3x3 kernels, whose copy costs about four times that)."""
    spelled = r.pref.rhs
    if spelled is None or not s.copies(n.operands[1], want):
        return want
    swapped = preferred_perm(n, "rhs", spelled.translate(str.maketrans("OI", "IO")))
    return want if s.copies(n.operands[1], swapped) else swapped


def _repaid(r: _Relayout, n: Node, s: _Scope, perms: dict[str, Perm]) -> bool:
    """Whether running ``n`` in ``perms`` costs less than in the program's layout.

    The cost is bytes moved, in the unit that ``kernel_copy_min_pixels`` sets: copying one
    element costs as much as that many multiply-adds run outside the preferred layout
    (every multiply-add of the convolution is one unit when it runs in the program's).
    Each side pays for the operands it would transpose and, for a result that leaves the
    convolutions (a weight gradient on its way to the update), for transposing it back to
    the program's layout. One copy is left out: the transpose into the device layout of an
    input that no convolution computed (the program's input, say) where the result goes on
    to other convolutions, as it starts a chain that stays in the device layout, which a
    decision about one convolution cannot weigh. (Downstream of a convolution that kept
    the program's layout, a convolution that moved alone would meet that layout again at
    the next residual add.) A kernel's copy is shared by the convolutions that read the
    same value as kernel (a training step's forward and input-gradient convolutions), each
    paying its share. So a convolution reading its weights from a parameter moves
    when it has ``kernel_copy_min_pixels`` output pixels or more, and a weight gradient
    whose operands are already in the device layout moves unless it is small (the
    program's layout would transpose both of them back)."""
    rate = r.pref.kernel_copy_min_pixels
    if rate == 0:
        return True
    lhs, rhs = n.operands
    ident = _identity(len(n.shape))
    chained = n.uid in s.bound
    entering = chained and s.env[lhs.uid][1] == ident and lhs.uid not in s.after_conv
    shared_by = s.kernel_readers.get(_kernel_source(rhs).uid, 1)
    moved = (0 if entering else s.copy_size(lhs, perms["lhs"])) + s.copy_size(rhs, perms["rhs"]) // shared_by
    if not chained and perms["out"] != ident and _leaves(n, s):
        moved += int(np.prod(n.shape))
    kept = s.copy_size(lhs, ident) + s.copy_size(rhs, ident)
    macs = _pixels(n) * int(np.prod(rhs.shape))
    return moved * rate <= kept * rate + macs


def _leaves(n: Node, s: _Scope) -> bool:
    """Whether ``n``'s result, in another layout than the program's, would be transposed
    back for its readers: none of them carries the layout on (a reduction, a pooling) or
    meets a value already in another layout (an elementwise op with such an operand, which
    would transpose one of the two anyway)."""
    for u in s.users[n.uid]:
        if u.op in _CARRIERS:
            return False
        if _is_elementwise(u) and any(o.uid in s.env and s.env[o.uid][1] != _identity(_rank(o))
                                      for o in u.operands if o is not n):
            return False
    return True


def _pixels(conv: Node) -> int:
    """Output positions of a convolution: batch x spatial (its elements per feature)."""
    return int(np.prod(conv.shape)) // max(conv.shape[conv.attr["output_feature_dimension"]], 1)


#: ops that run in their operand's layout whatever their readers (the elementwise ones aside)
_CARRIERS = _TRANSPARENT | {Op.REDUCE, Op.CONVOLUTION}

_RULES: dict[Op, Callable[[_Relayout, Node, _Scope], tuple[Node, Perm] | None]] = {
    Op.CONVOLUTION: _convolution,
    Op.REDUCE: _reduce,
    Op.REDUCE_WINDOW: _reduce_window,
    Op.TRANSPOSE: _transpose,
    Op.REVERSE: _reverse,
    Op.SLICE: _slice,
    Op.PAD: _pad,
    Op.CONCATENATE: _concatenate,
    Op.RESHAPE: _reshape,
}


def assign_conv_layouts(comp: Computation, pref: ConvLayout, claims: Callable[[Node], bool] | None = None
                        ) -> Computation:
    """``comp`` with every convolution in ``pref``'s layout (see the module docstring);
    ``comp`` itself when no convolution changes."""
    if not pref.any:
        return comp
    r = _Relayout(pref, claims)
    out = r.computation(comp)
    return out if r.changed else comp
