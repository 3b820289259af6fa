"""The model's equations as LaTeX, rendered from a BertConfig, so a page shows the formulas of the model it trains.

``formulas(config)`` is pure: the same config gives the same strings, and two configs that compute differently
give different strings for the part where they differ (tests/test_tutorial_presets.py checks it for every preset).
References: embeddings BERT §3 Fig. 2, Vaswani §3.4-3.5; attention Vaswani §3.2.1; sublayer connections Vaswani
§3.1 (post-norm) and Xiong et al. 2020 (pre-norm); LayerNorm Ba et al. 2016; MLM BERT §3.1; NSP BERT §3.2.
"""
from __future__ import annotations

from bertcore.config import BertConfig

_ACT = {"gelu": r"\mathrm{GELU}", "gelu_tanh": r"\mathrm{GELU}_{\tanh}", "relu": r"\mathrm{ReLU}"}
_ACT_DEF = {
    "gelu": r"\mathrm{GELU}(z) = z\,\Phi(z)",
    "gelu_tanh": r"\mathrm{GELU}_{\tanh}(z) = \tfrac{1}{2} z \left(1 + \tanh\!\left[\sqrt{2/\pi}\,(z + 0.044715 z^3)\right]\right)",
    "relu": r"\mathrm{ReLU}(z) = \max(0, z)",
}


def activation_formula(c: BertConfig) -> str:
    """The FFN's activation as LaTeX: its name applied to z and its definition (exact erf GELU, the tanh
    approximation, or ReLU)."""
    return _ACT_DEF[c.hidden_act]


def activation_name(c: BertConfig) -> str:
    """The FFN's activation as a LaTeX operator name (\\mathrm{GELU}, \\mathrm{GELU}_{\\tanh}, \\mathrm{ReLU})."""
    return _ACT[c.hidden_act]


def _eps(e: float) -> str:
    mant, exp = f"{e:.0e}".split("e")
    return rf"\epsilon = {mant} \times 10^{{{int(exp)}}}" if mant != "1" else rf"\epsilon = 10^{{{int(exp)}}}"


def layer_norm_formula(c: BertConfig) -> str:
    """The LayerNorm every norm site uses (Ba et al. 2016, or the seeds' std variant)."""
    if c.layer_norm_style == "unbiased_std":
        return (r"\mathrm{LN}(x) = a \odot \frac{x - \mu}{s + \epsilon} + b,\quad \mu = \tfrac{1}{d}\sum_i x_i,\quad "
                r"s = \sqrt{\tfrac{1}{d-1}\sum_i (x_i - \mu)^2},\quad " + _eps(c.layer_norm_eps))
    return (r"\mathrm{LN}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta,\quad "
            r"\mu = \tfrac{1}{d}\sum_i x_i,\quad \sigma^2 = \tfrac{1}{d}\sum_i (x_i - \mu)^2,\quad " + _eps(c.layer_norm_eps))


def embedding_formula(c: BertConfig) -> str:
    """The input representation: token (+ scale) + position + segment, then LayerNorm and dropout if any."""
    tok = r"\sqrt{d}\,E_{\mathrm{tok}}[x_t]" if c.embedding_scale else r"E_{\mathrm{tok}}[x_t]"
    if c.position_embedding == "learned":
        pos = r"P[t]"
        pos_def = (r"P \text{ learned}" if c.train_position_embeddings
                   else r"P \sim \mathcal{N}(0, 1) \text{ fixed (never trained)}")
    else:
        pos = r"\mathrm{PE}_t"
        pos_def = r"\mathrm{PE}_{t,2i} = \sin(t / 10000^{2i/d}),\ \mathrm{PE}_{t,2i+1} = \cos(t / 10000^{2i/d})"
    terms = [tok, pos]
    if c.type_vocab_size:
        terms.append(r"S[s_t]")
        seg_def = (r"s_t \in \{1, 2\},\ s_t = 0 \text{ at padding}" if c.segment_ids == "1/2"
                   else r"s_t \in \{0, 1\}")
    else:
        seg_def = r"\text{no segment embedding}"
    e = " + ".join(terms)
    body = rf"\mathrm{{LN}}({e})" if c.embedding_layer_norm else e
    if c.embedding_dropout:
        body = rf"\mathrm{{Dropout}}\left({body}\right)"
    return rf"h^{{0}}_t = {body},\quad {pos_def},\quad {seg_def}"


def mask_cases(c: BertConfig) -> str:
    """The mask M added to the scaled scores, as LaTeX: −∞ at padded keys (Vaswani §3.2.1), and for a left-to-right
    model (BERT Table 5's LTR, Vaswani §3.2.3's decoder mask) also above the diagonal, at keys right of the query."""
    pad = r"\text{key } j \text{ is padding}"
    if c.causal:
        where = r"j > i \text{ (a key right of the query)}" + (r"\text{ or } " + pad if c.attention_padding_mask else "")
    elif c.attention_padding_mask:
        return r"M_{ij} = -\infty \text{ where key } j \text{ is padding}"
    else:
        return ""
    return rf"M_{{ij}} = \begin{{cases}} -\infty & {where} \\ 0 & \text{{otherwise}} \end{{cases}}"


def attention_formula(c: BertConfig) -> str:
    """Scaled dot-product attention per head, with or without the padding mask (Vaswani §3.2.1-3.2.2), and with the
    causal mask of a left-to-right model (§3.2.3)."""
    if c.attention_padding_mask or c.causal:
        scores, note = r"\frac{Q_k K_k^\top}{\sqrt{d_k}} + M", mask_cases(c)
    else:
        scores, note = r"\frac{Q_k K_k^\top}{\sqrt{d_k}}", r"\text{no padding mask: padded keys are attended}"
    return (rf"\mathrm{{head}}_k = \mathrm{{softmax}}\!\left({scores}\right) V_k,\quad "
            rf"\mathrm{{MHA}}(x) = W^O [\mathrm{{head}}_1; \dots; \mathrm{{head}}_H],\quad {note}")


def sublayer_formula(c: BertConfig) -> str:
    """Where the LayerNorm sits around each sublayer F in {MHA, FFN}, a dropout of each block's output (BERT-pytorch),
    the FFN itself, and a final LayerNorm."""
    conn = {
        "post": r"x \leftarrow \mathrm{LN}\big(x + \mathrm{Dropout}(F(x))\big)",
        "pre": r"x \leftarrow x + \mathrm{Dropout}\big(F(\mathrm{LN}(x))\big)",
        "sublayer_output": r"x \leftarrow x + \mathrm{LN}\big(\mathrm{Dropout}(F(x))\big)",
    }[c.norm_placement]
    inner = rf"{_ACT[c.hidden_act]}(W_1 x + b_1)"
    if c.ffn_dropout:
        inner = rf"\mathrm{{Dropout}}\big({inner}\big)"
    ffn = rf"\mathrm{{FFN}}(x) = W_2\,{inner} + b_2,\quad {_ACT_DEF[c.hidden_act]}"
    block = r",\ \text{then } x \leftarrow \mathrm{Dropout}(x) \text{ per block}" if c.block_dropout else ""
    final = r",\quad h = \mathrm{LN}(x_L)" if c.final_layer_norm else r",\quad h = x_L"
    return rf"{conn},\ F \in \{{\mathrm{{MHA}}, \mathrm{{FFN}}\}}{block}{final};\quad {ffn}"


def mlm_formula(c: BertConfig) -> str:
    """The MLM head and loss over the selected positions M (BERT §3.1)."""
    act = _ACT[c.hidden_act]
    head = {
        "transform": rf"z_t = E_{{\mathrm{{tok}}}}\,\mathrm{{LN}}\big({act}(W h_t + b)\big) + b'\ \text{{(decoder tied to }}"
                     r"E_{\mathrm{tok}}\text{)}",
        "mlp": rf"z_t = W_2\,\mathrm{{LN}}\big({act}(W_1 h_t + b_1)\big) + b_2",
        "linear": r"z_t = W h_t + b",
    }[c.mlm_head]
    return (head + r",\quad \mathcal{L}_{\mathrm{MLM}} = -\frac{1}{|M|}\sum_{t \in M} "
            r"\log \mathrm{softmax}(z_t)_{x_t}")


def tex_token(token: str) -> str:
    """A special token as LaTeX in its vocabulary's spelling: ``[CLS]`` -> ``[\\mathrm{CLS}]``, BERT-pytorch's
    ``<sos>`` -> ``\\langle\\mathrm{sos}\\rangle``; other tokens upright."""
    if len(token) > 2 and token[0] + token[-1] in ("[]", "<>") and token[1:-1].isalnum():
        inner = rf"\mathrm{{{token[1:-1]}}}"
        return rf"[{inner}]" if token[0] == "[" else rf"\langle {inner} \rangle"
    return rf"\text{{{token}}}"


def nsp_formula(c: BertConfig, cls_token: str = "[CLS]") -> str:
    """The NSP head and its loss, a cross-entropy over both labels (BERT §3.2); ``cls_token`` is the first token
    as the model's vocabulary spells it (``<sos>`` for BERT-pytorch's). A left-to-right model's head reads the last
    real token instead, the only one whose causal context is the whole input."""
    h_cls = r"h_{\mathrm{last}}" if c.causal else rf"h_{{{tex_token(cls_token)}}}"
    c_def = (rf"c = \tanh(W_p {h_cls} + b_p)" if c.nsp_head == "pooler"
             else rf"c = {h_cls}\ \text{{(first position, no pooler)}}")
    # two lines (the head, then the loss): one line is wider than a page at 1400 px
    return (r"\begin{gathered}" + c_def + r",\quad p(y \mid x) = \mathrm{softmax}(W_s c + b_s)_y \\ "
            r"\mathcal{L}_{\mathrm{NSP}} = -\frac{1}{B}\sum_{b=1}^{B} \log p(y_b \mid x_b),\ "
            r"y \in \{\mathrm{IsNext}, \mathrm{NotNext}\}\end{gathered}")


def formulas(c: BertConfig, tokenizer=None) -> dict[str, str]:
    """LaTeX for each part of the model ``c`` describes: embeddings, attention, sublayer (with the FFN),
    layer_norm, mlm and nsp. Keys are stable; pages render each with st.latex. With ``tokenizer``, special
    tokens are written as its vocabulary spells them (``[CLS]``, or ``<sos>`` for a BERT-pytorch vocabulary)."""
    cls = getattr(tokenizer, "cls_token", None) or "[CLS]"
    return {"embeddings": embedding_formula(c), "attention": attention_formula(c), "sublayer": sublayer_formula(c),
            "layer_norm": layer_norm_formula(c), "mlm": mlm_formula(c), "nsp": nsp_formula(c, cls)}
