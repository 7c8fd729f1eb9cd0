"""The op enum: every primitive's name, on its own so that small tables keyed by op (the
reduce kinds, a renderer's expression table) need not import the whole op table."""
from __future__ import annotations

import enum


class Op(enum.Enum):
    # Members are singletons compared by identity: hashing by identity too keeps every
    # op-table lookup (node.traits, in every pass) off Enum's Python-level __hash__.
    __hash__ = object.__hash__

    # structure
    PARAMETER = "parameter"
    CONSTANT = "constant"
    IOTA = "iota"
    CONVERT = "convert"
    TUPLE = "tuple"
    GET_TUPLE_ELEMENT = "get-tuple-element"
    FUSION = "fusion"
    # unary elementwise
    NEG = "negate"
    ABS = "abs"
    EXP = "exponential"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    TANH = "tanh"
    LOGISTIC = "logistic"
    SIN = "sine"
    COS = "cosine"
    FLOOR = "floor"
    CEIL = "ceil"
    SIGN = "sign"
    NOT = "not"
    # binary elementwise
    ADD = "add"
    SUB = "subtract"
    MUL = "multiply"
    DIV = "divide"
    REM = "remainder"
    POW = "power"
    MAX = "maximum"
    MIN = "minimum"
    AND = "and"
    OR = "or"
    COMPARE = "compare"
    SELECT = "select"
    # reductions and contractions
    REDUCE = "reduce"
    DOT_GENERAL = "dot"
    # windowed (a window slides over spatial dims)
    CONVOLUTION = "convolution"
    REDUCE_WINDOW = "reduce-window"
    # data movement
    BROADCAST_IN_DIM = "broadcast"
    RESHAPE = "reshape"
    TRANSPOSE = "transpose"
    SLICE = "slice"
    PAD = "pad"
    CONCATENATE = "concatenate"
    REVERSE = "reverse"
    # indexing (values of one operand choose positions in another)
    GATHER = "gather"
    SCATTER = "scatter"
    DYNAMIC_SLICE = "dynamic-slice"
    DYNAMIC_UPDATE_SLICE = "dynamic-update-slice"
    # others
    RNG_BIT_GENERATOR = "rng-bit-generator"
    CUSTOM_CALL = "custom-call"
    # elementwise completeness (float)
    ATAN2 = "atan2"
    TAN = "tan"
    EXPM1 = "exponential-minus-one"
    LOG1P = "log-plus-one"
    CBRT = "cbrt"
    ERF = "erf"
    ROUND_NEAREST_EVEN = "round-nearest-even"
    IS_FINITE = "is-finite"
    NEXT_AFTER = "next-after"
    # bit operations
    XOR = "xor"
    SHIFT_LEFT = "shift-left"
    SHIFT_RIGHT_LOGICAL = "shift-right-logical"
    SHIFT_RIGHT_ARITHMETIC = "shift-right-arithmetic"
    POPCNT = "popcnt"
    CLZ = "count-leading-zeros"
    BITCAST_CONVERT = "bitcast-convert"
    # control flow
    WHILE = "while"
    CONDITIONAL = "conditional"
    # sorting
    SORT = "sort"
    # collectives (SPMD: values exchanged between replicas; ir/collectives.py)
    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_TO_ALL = "all-to-all"
    COLLECTIVE_PERMUTE = "collective-permute"
    REPLICA_ID = "replica-id"

    def __repr__(self) -> str:
        return f"Op.{self.name}"


#: entry nodes that only name, assemble or hold values: no device launches anything for them
PLUMBING = frozenset({Op.PARAMETER, Op.CONSTANT, Op.TUPLE, Op.GET_TUPLE_ELEMENT})
