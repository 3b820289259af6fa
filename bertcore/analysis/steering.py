"""Steering with a feature: add its decoder direction at its site and see what the model predicts.

The steering vector of feature i at strength s is ``s · a_max,i · W_dec[i]``: ``a_max`` is the largest activation
the feature reached on the evaluation tokens, so s = 1 writes what the feature writes when it fires most (W_dec[i]
has unit norm for a top-k SAE). It is added to the site's tensor at every token through the glass box's replaceable
tensors, ``Tap(edit={"layer.L.output": h ↦ h + v})`` (``bertcore.model.tap``): the model's own forward pass runs,
nothing of it is copied (as in Templeton et al. 2024's feature steering, and Turner et al. 2023's activation
addition).

For a built-in skill (``bertcore.data.skill_items``: minimal pairs with a right and a wrong word), the word the
feature favours in an item is the one of the two whose MLM logit its direction raises more on average (its output
effect, ``bertcore.analysis.features.output_effects``, saved with the SAE). The items that can flip are those where
the model prefers the other word before steering; ``flip_rate`` is the share of them whose preferred word changes.
``random_flip_rate`` is the same share for random directions of the same norm (seeded Gaussian directions,
averaged over ``RANDOM_DIRECTIONS``), the control: a feature that means something flips far more.
"""
from __future__ import annotations

import torch
from torch import nn

from bertcore.analysis.inference import FillMaskResult, MaskPrediction, mask_positions
from bertcore.analysis.lens import NO_MLM_HEAD, has_mlm_head
from bertcore.analysis.skills import SkillSuite
from bertcore.data.skill_items import NSP_SKILLS, SKILLS, builtin_items
from bertcore.errors import InputError
from bertcore.message import Message
from bertcore.model.modes import eval_mode
from bertcore.model.tap import Tap

RANDOM_DIRECTIONS = 5
MAX_STRENGTH = 100.0


def check_feature(feature, d_sae: int) -> int:
    if isinstance(feature, bool) or not isinstance(feature, int) or not 0 <= feature < d_sae:
        raise InputError(Message("feature {f} does not exist; this SAE has features 0..{last}", f=repr(feature),
                                 last=d_sae - 1))
    return feature


def steering_vector(sae, feature: int, strength: float, max_activation: float) -> torch.Tensor:
    """``strength · max_activation · W_dec[feature]`` (width,)."""
    check_feature(feature, sae.d_sae)
    if not -MAX_STRENGTH <= float(strength) <= MAX_STRENGTH:
        raise InputError(Message("strength {s} is out of range; use a number in [-{m}, {m}] (1 = the feature's "
                                 "largest activation)", s=strength, m=MAX_STRENGTH))
    return sae.W_dec[feature].detach().float() * float(strength) * float(max_activation)


def random_direction(like: torch.Tensor, seed: int) -> torch.Tensor:
    """A seeded Gaussian direction with the same norm as ``like``."""
    v = torch.randn(like.shape, generator=torch.Generator().manual_seed(int(seed)))
    return v * (like.norm() / v.norm().clamp_min(1e-12))


def steering_tap(hook: str, vec: torch.Tensor | None) -> Tap:
    """The Tap that adds ``vec`` to the tensor ``hook`` at every token (an empty Tap for None)."""
    if vec is None:
        return Tap()
    return Tap(edit={hook: lambda h: h + vec.to(h.dtype)})


class Steered(nn.Module):
    """``model`` whose every forward pass adds ``vec`` at ``hook`` (so code that calls a model, such as
    ``SkillSuite.margins``, runs steered)."""

    def __init__(self, model, hook: str, vec: torch.Tensor | None):
        super().__init__()
        self.model, self.hook, self.vec = model, hook, vec
        self.config = model.config

    def forward(self, *args, **kw):
        kw.pop("tap", None)
        return self.model(*args, tap=steering_tap(self.hook, self.vec), **kw)


def fill_mask_steered(model, tokenizer, text: str, hook: str, vec: torch.Tensor | None, top_k: int = 5,
                      max_len: int | None = None) -> FillMaskResult:
    """Fill-mask (BERT §3.1) of ``text`` with ``vec`` added at ``hook`` (None: the clean model)."""
    if not has_mlm_head(model):
        raise InputError(NO_MLM_HEAD)
    limit = int(max_len) if max_len is not None else int(model.config.max_position_embeddings)
    ids, types, truncated, positions = mask_positions(tokenizer, text, limit)
    x = torch.tensor([ids], dtype=torch.long)
    with eval_mode(model):
        out = model(x, token_type_ids=torch.tensor([types]), attention_mask=torch.ones_like(x),
                    tap=steering_tap(hook, vec))
        probs = torch.softmax(out.mlm_logits[0, positions].float(), dim=-1)
        p, idx = probs.topk(min(int(top_k), probs.shape[-1]), dim=-1)
    masks = [MaskPrediction(pos, list(zip(tokenizer.convert_ids_to_tokens(ix), map(float, pr))))
             for pos, pr, ix in zip(positions, p.tolist(), idx.tolist())]
    return FillMaskResult(list(tokenizer.convert_ids_to_tokens(ids)), masks, truncated)


def steer_text(model, tokenizer, sae, hook: str, feature: int, strength: float, max_activation: float, text: str,
               top_k: int = 5) -> dict:
    """Fill-mask before and after steering: {"feature", "strength", "vector_norm", "tokens", "before", "after"}
    with per [MASK] its position and top-k [token, probability]."""
    vec = steering_vector(sae, feature, strength, max_activation)
    res = {}
    for name, v in (("before", None), ("after", vec)):
        r = fill_mask_steered(model, tokenizer, text, hook, v, top_k)
        res["tokens"] = r.tokens
        res[name] = [{"position": m.position, "top": [[t, p] for t, p in m.candidates]} for m in r.masks]
    return {"feature": feature, "strength": float(strength), "vector_norm": float(vec.norm()), **res}


def skill_suite(corpus, tokenizer, skill: str, max_len: int) -> SkillSuite:
    """The held-out items of one built-in MLM skill for a run's corpus (InputError when there are none)."""
    if skill not in SKILLS or skill in NSP_SKILLS:
        mlm = [s for s in SKILLS if s not in NSP_SKILLS]
        raise InputError(Message("skill {skill} cannot be steered; choose an MLM skill: {names}", skill=repr(skill),
                                 names=", ".join(mlm)))
    items = [it for it in builtin_items(corpus) if it.skill == skill] if corpus is not None else []
    suite = SkillSuite(items, tokenizer, max_len) if items else None
    if suite is None or not suite.items:
        raise InputError(Message("this run has no {skill} items: the built-in skills need a model trained on the "
                                 "built-in English grammar (with its vocabulary); steer a text with [MASK] instead",
                                 skill=skill))
    return suite


def skill_flips(model, suite: SkillSuite, hook: str, vec: torch.Tensor, effect: torch.Tensor,
                seed: int = 0) -> dict:
    """Steer every item of ``suite`` with ``vec`` and with random directions of the same norm (module docstring).
    ``effect``: the feature's output effect, a Δlogit per vocabulary id (V,)."""
    tok = suite.tokenizer
    ids = [(tok.encode(it.right)[0], tok.encode(it.wrong)[0]) for it in suite.items]  # one token each (SkillSuite)
    favours_right = [bool(effect[r] >= effect[w]) for r, w in ids]
    before = suite.margins(model)
    after = suite.margins(Steered(model, hook, vec))
    rand = [suite.margins(Steered(model, hook, random_direction(vec, seed + 1 + k))) for k in range(RANDOM_DIRECTIONS)]
    can, flipped, rflips, changed = 0, 0, [0] * RANDOM_DIRECTIONS, 0
    examples = []
    for i, it in enumerate(suite.items):
        was, now = before[i] > 0, after[i] > 0  # True: prefers the right word
        changed += was != now
        if was == favours_right[i]:
            continue  # the model already prefers the word the feature favours: nothing to flip
        can += 1
        flipped += was != now
        for k in range(RANDOM_DIRECTIONS):
            rflips[k] += was != (rand[k][i] > 0)
        if len(examples) < 8:
            examples.append({"text": it.text, "before": it.right if was else it.wrong,
                             "after": it.right if now else it.wrong,
                             "favoured": it.right if favours_right[i] else it.wrong})
    n = len(suite.items)
    nan = float("nan")
    return {"items": n, "can_flip": can, "flip_rate": flipped / can if can else nan,
            "random_flip_rate": sum(rflips) / (can * RANDOM_DIRECTIONS) if can else nan,
            "random_flip_rates": [r / can if can else nan for r in rflips],
            "changed_share": changed / n if n else nan, "accuracy_before": sum(m > 0 for m in before) / n if n else nan,
            "vector_norm": float(vec.norm()), "examples": examples}
