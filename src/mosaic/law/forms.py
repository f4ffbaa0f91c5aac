"""Loss-law functional forms as sums of power-law terms, evaluated in log space.

Every form here is ``L = sum_k c_k * prod_f x_f^(-p_kf)`` with positive prefactors ``c_k``
and positive exponents ``p_kf`` (a term without factors is the irreducible constant).
Coefficients are handled as logs (the paper fits "in log-coefficient space", Sec. 4.2), so

    log t_k = log c_k - sum_f exp(log p_kf) * log x_f,      log L = logsumexp_k(log t_k),

and the gradient of ``log L`` with respect to the log-coefficients is analytic:
``d log L / d log c_k = w_k`` and ``d log L / d log p_kf = -w_k * p_kf * log x_f`` with
``w = softmax(log t)``. To add a form, declare its terms and an initialisation box.

Contractions use ``np.einsum`` rather than BLAS: the arrays are small, and multithreaded BLAS
on tiny products is slower and not bitwise reproducible across thread counts.

Features (the law's raw inputs, SI counts):
    n_total          total parameters N_tot (for the dense Chinchilla form: N)
    tokens           training tokens D
    active_fraction  1 - S = N_act / N_tot
    split_factor     expert split factor G = d_ff / d_expert (Eq. 8)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

import numpy as np

from mosaic.errors import MosaicInputError

FEATURES: tuple[str, ...] = ("n_total", "tokens", "active_fraction", "split_factor")

# Safety-net bounds in natural units when the caller gives none; wide enough to be inactive
# at every optimum we know (Table 2, Epoch's Chinchilla fit) yet keep exp() finite.
DEFAULT_PREFACTOR_BOUNDS: tuple[float, float] = (1e-10, 1e10)
DEFAULT_EXPONENT_BOUNDS: tuple[float, float] = (1e-6, 10.0)


@dataclass(frozen=True)
class PowerTerm:
    """One additive term ``prefactor / prod(feature ** exponent)``; no factors = constant."""

    prefactor: str
    factors: tuple[tuple[str, str], ...] = ()  # (feature name, exponent coefficient name)


@dataclass(frozen=True)
class LogPrediction:
    """``log L`` for m coefficient sets on n runs, with its reverse-mode derivative."""

    value: np.ndarray  # (m, n) log predicted loss
    weights: np.ndarray  # (m, n, K) softmax of the term logs
    exponents: np.ndarray  # (m, P) coefficient values, zero for prefactors
    design: np.ndarray  # (n, K, P) log-feature multiplying exponent p in term k
    prefactor_onehot: np.ndarray  # (K, P)

    def pullback(self, cotangent: np.ndarray) -> np.ndarray:
        """Return ``sum_n cotangent[m, n] * d log L[m, n] / d log-coefficients`` as (m, P)."""
        weighted = cotangent[:, :, None] * self.weights  # (m, n, K)
        from_prefactors = np.einsum("mk,kp->mp", weighted.sum(axis=1), self.prefactor_onehot)
        from_exponents = np.einsum("mnk,nkp->mp", weighted, self.design)
        return from_prefactors - self.exponents * from_exponents

    def jacobian(self) -> np.ndarray:
        """Full ``d log L / d log-coefficients`` as (m, n, P) (for checks and small problems)."""
        from_prefactors = np.einsum("mnk,kp->mnp", self.weights, self.prefactor_onehot)
        from_exponents = np.einsum("mnk,nkp->mnp", self.weights, self.design)
        return from_prefactors - self.exponents[:, None, :] * from_exponents


@dataclass(frozen=True)
class LawForm:
    """A named loss law: its terms, coefficient order, and the box spread starts are drawn from.

    Attributes:
        name: identifier used on the command line and in law files.
        source: where the formula comes from (equation number or paper).
        params: coefficient names in display order; must match the names in ``terms``.
        terms: the additive power-law terms.
        init_box: per coefficient, the (low, high) natural-unit range of spread starts.
    """

    name: str
    source: str
    params: tuple[str, ...]
    terms: tuple[PowerTerm, ...]
    init_box: Mapping[str, tuple[float, float]] = field(repr=False)

    def __post_init__(self) -> None:
        named = [t.prefactor for t in self.terms] + [e for t in self.terms for _, e in t.factors]
        if sorted(named) != sorted(self.params):
            raise ValueError(f"form {self.name}: terms name {named}, params are {self.params}")
        unknown = {f for t in self.terms for f, _ in t.factors} - set(FEATURES)
        if unknown:
            raise ValueError(f"form {self.name}: unknown features {sorted(unknown)}")
        if set(self.init_box) != set(self.params):
            raise ValueError(f"form {self.name}: init_box must cover exactly {self.params}")
        object.__setattr__(self, "init_box", MappingProxyType(dict(self.init_box)))

    @property
    def is_dense(self) -> bool:
        """A form without a sparsity term (e.g. Chinchilla's): it cannot tell MoE
        geometries of one N_tot apart."""
        return "active_fraction" not in self.features

    @cached_property
    def features(self) -> tuple[str, ...]:
        """Features this form reads, in the canonical order of ``FEATURES``."""
        used = {f for t in self.terms for f, _ in t.factors}
        return tuple(f for f in FEATURES if f in used)

    @cached_property
    def is_exponent(self) -> np.ndarray:
        """Boolean mask over ``params``: True for exponents, False for prefactors/constants."""
        exponents = {e for t in self.terms for _, e in t.factors}
        return np.array([p in exponents for p in self.params])

    @cached_property
    def _prefactor_onehot(self) -> np.ndarray:
        onehot = np.zeros((len(self.terms), len(self.params)))
        for k, term in enumerate(self.terms):
            onehot[k, self.params.index(term.prefactor)] = 1.0
        return onehot

    @cached_property
    def _factor_map(self) -> np.ndarray:
        """(K, P, F) indicator: exponent p multiplies log-feature f in term k."""
        fmap = np.zeros((len(self.terms), len(self.params), len(self.features)))
        for k, term in enumerate(self.terms):
            for feature, exponent in term.factors:
                fmap[k, self.params.index(exponent), self.features.index(feature)] = 1.0
        return fmap

    def default_bounds(self) -> np.ndarray:
        """(P, 2) natural-unit bounds used when the caller gives none."""
        return np.array(
            [
                DEFAULT_EXPONENT_BOUNDS if is_exp else DEFAULT_PREFACTOR_BOUNDS
                for is_exp in self.is_exponent
            ]
        )

    def design(self, log_features: np.ndarray) -> np.ndarray:
        """(n, K, P) design tensor from (n, F) log-features (columns in ``self.features``)."""
        return np.einsum("kpf,nf->nkp", self._factor_map, log_features)

    def term_logs(self, log_coefs: np.ndarray, design: np.ndarray) -> np.ndarray:
        """(m, n, K) log of each additive term; ``log L`` is their log-sum-exp over K."""
        log_coefs = np.atleast_2d(log_coefs)
        exponents = np.where(self.is_exponent, np.exp(log_coefs), 0.0)
        prefactors = np.einsum("mp,kp->mk", log_coefs, self._prefactor_onehot)
        return prefactors[:, None, :] - np.einsum("nkp,mp->mnk", design, exponents)

    def log_predict(self, log_coefs: np.ndarray, design: np.ndarray) -> LogPrediction:
        """Evaluate ``log L`` for (m, P) log-coefficients on a (n, K, P) design."""
        log_coefs = np.atleast_2d(log_coefs)
        exponents = np.where(self.is_exponent, np.exp(log_coefs), 0.0)
        term_logs = self.term_logs(log_coefs, design)
        top = term_logs.max(axis=2, keepdims=True)
        shifted = np.exp(term_logs - top)
        total = shifted.sum(axis=2, keepdims=True)
        return LogPrediction(
            value=(top + np.log(total))[:, :, 0],
            weights=shifted / total,
            exponents=exponents,
            design=design,
            prefactor_onehot=self._prefactor_onehot,
        )

    def term_exponents(self, log_coefs: np.ndarray) -> np.ndarray:
        """(m, K, F) exponent of each feature in each term, so that
        ``d log L / d log x_f = -sum_k weights_k * term_exponents[k, f]``."""
        exponents = np.where(self.is_exponent, np.exp(np.atleast_2d(log_coefs)), 0.0)
        return np.einsum("mp,kpf->mkf", exponents, self._factor_map)

    def vector(self, coefficients: Mapping[str, float]) -> np.ndarray:
        """Natural-unit coefficients as a (P,) vector in ``params`` order, validated."""
        missing = [p for p in self.params if p not in coefficients]
        extra = sorted(set(coefficients) - set(self.params))
        if missing or extra:
            raise MosaicInputError(
                f"coefficients for form '{self.name}' must be exactly {list(self.params)}; "
                f"missing {missing}, unexpected {extra}"
            )
        values = np.array([float(coefficients[p]) for p in self.params])
        bad = [p for p, v in zip(self.params, values, strict=True) if not 0 < v < np.inf]
        if bad:
            shown = {p: coefficients[p] for p in bad}
            raise MosaicInputError(
                f"coefficients {shown} of form '{self.name}' must be positive finite numbers"
            )
        return values


# Eq. 10: joint G-augmented law
#   L = a/N^alpha + b/D^beta + c/(1-S)^lambda + j/((1-S)^delta N^gamma G^eta) + e
JOINT = LawForm(
    name="joint",
    source="Eq. 10 (Sec. 4.2)",
    params=("a", "b", "c", "j", "e", "alpha", "beta", "lambda", "delta", "gamma", "eta"),
    terms=(
        PowerTerm("a", (("n_total", "alpha"),)),
        PowerTerm("b", (("tokens", "beta"),)),
        PowerTerm("c", (("active_fraction", "lambda"),)),
        PowerTerm(
            "j",
            (("active_fraction", "delta"), ("n_total", "gamma"), ("split_factor", "eta")),
        ),
        PowerTerm("e"),
    ),
    init_box={
        "a": (0.1, 1e3),
        "b": (1.0, 1e4),
        "c": (1e-3, 1.0),
        "j": (1e-2, 1e2),
        "e": (0.05, 2.0),
        "alpha": (0.02, 1.0),
        "beta": (0.02, 1.0),
        "lambda": (0.02, 1.0),
        "delta": (0.02, 1.5),
        "gamma": (0.02, 1.0),
        "eta": (0.02, 2.0),
    },
)

# Eq. 9: per-G law, Eq. 10 without the split-factor factor (fit on one G stratum).
PER_G = LawForm(
    name="per-g",
    source="Eq. 9 (Sec. 4.1)",
    params=("a", "b", "c", "j", "e", "alpha", "beta", "lambda", "delta", "gamma"),
    terms=(
        PowerTerm("a", (("n_total", "alpha"),)),
        PowerTerm("b", (("tokens", "beta"),)),
        PowerTerm("c", (("active_fraction", "lambda"),)),
        PowerTerm("j", (("active_fraction", "delta"), ("n_total", "gamma"))),
        PowerTerm("e"),
    ),
    init_box={p: JOINT.init_box[p] for p in JOINT.params if p != "eta"},
)

# Hoffmann et al. (2022) Eq. 2, dense: L = E + A/N^alpha + B/D^beta (N = n_total).
# Init box spans the Epoch replication grid (arXiv:2404.10102, Sec. 3).
CHINCHILLA = LawForm(
    name="chinchilla",
    source="Hoffmann et al. 2022, Eq. 2",
    params=("E", "A", "B", "alpha", "beta"),
    terms=(
        PowerTerm("E"),
        PowerTerm("A", (("n_total", "alpha"),)),
        PowerTerm("B", (("tokens", "beta"),)),
    ),
    init_box={
        "E": (np.exp(-1.0), np.exp(1.0)),
        "A": (1.0, np.exp(25.0)),
        "B": (1.0, np.exp(25.0)),
        "alpha": (0.05, 2.0),
        "beta": (0.05, 2.0),
    },
)

FORMS: Mapping[str, LawForm] = MappingProxyType({f.name: f for f in (JOINT, PER_G, CHINCHILLA)})


def get_form(name: str) -> LawForm:
    """Look a form up by name, with an error that lists the known ones."""
    try:
        return FORMS[name]
    except KeyError:
        raise MosaicInputError(f"form must be one of {sorted(FORMS)}, got {name!r}") from None
