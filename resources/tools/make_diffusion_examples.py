#!/usr/bin/env python3
"""Writes resources/models/stable-diffusion-2.1.json and controlnet.json.

The layer list follows the released Stable Diffusion 2.1 (768-v) configuration
(stabilityai/stable-diffusion-2-1: unet/config.json, vae/config.json,
text_encoder/config.json): UNet block_out_channels (320, 640, 1280, 1280), two ResNet
blocks per level, one transformer per ResNet in the three cross-attention levels,
64-channel attention heads, cross-attention width 1024, linear projections; the VAE
encoder with channels (128, 256, 512, 512) and two ResNet blocks per level; the OpenCLIP
ViT-H/14 text transformer (width 1024, 16 heads, 77 tokens) of which SD 2.x uses 23 of 24
layers (penultimate-layer features). ControlNet (Zhang et al. 2023, Fig. 3) is a trainable
copy of the UNet encoder and middle block, a small hint encoder and 13 zero convolutions.

The numbers are ESTIMATES computed here from those shapes, not measurements:
- FLOPs: 2 per multiply-add of every convolution and linear layer, plus the attention score
  and context products (4*N*M*c for N queries, M keys, width c). Norms and pointwise ops are
  ignored (they are memory-bound and small next to the GEMMs).
- params: weights of the convolutions and linear layers (norms and biases included where
  cheap to count; the totals land within 2% of the released 865M UNet / 34M VAE encoder).
- activation_bytes (per microbatch, bf16, no recomputation): a ResNet block keeps
  2*(3*c_in + 4*c_out) bytes per pixel (norm, SiLU and conv inputs of both halves); a
  transformer block keeps 34*c bytes per token, Korthikanti et al. 2022's per-token
  coefficient, without the a*s/h score term because SD training uses memory-efficient
  attention (xformers / FlashAttention).
- output_bytes: the tensor handed to the next layer plus every UNet skip tensor still
  waiting for its decoder block: a pipeline cut there must ship all of them.

It also rewrites resources/workspaces/default.pipestudio (SD 2.1 on the 1x8 A100 cluster).

Run: python3 resources/tools/make_diffusion_examples.py
"""
import json
import os

BATCH = 4            # samples_per_microbatch
RES = 768            # SD 2.1 (768-v) trains on 768x768 images
LATENT = RES // 8    # 96x96x4 latents
TEXT_TOKENS = 77
CTX = 1024           # cross-attention width (OpenCLIP ViT-H text width)
BF16 = 2


def conv(cin, cout, hw, k=3):
    """FLOPs per sample and weights of a k x k convolution producing hw output pixels."""
    return 2.0 * hw * cin * cout * k * k, cin * cout * k * k + cout


def resnet(cin, cout, hw, temb=1280):
    f1, p1 = conv(cin, cout, hw)
    f2, p2 = conv(cout, cout, hw)
    flops, params = f1 + f2, p1 + p2 + temb * cout + 4 * (cin + cout)
    if cin != cout:  # 1x1 shortcut
        fs, ps = conv(cin, cout, hw, 1)
        flops, params = flops + fs, params + ps
    act = BF16 * BATCH * hw * (3 * cin + 4 * cout)
    return flops, params, act


def transformer(c, n, ctx_tokens=TEXT_TOKENS, ctx_width=CTX, cross=True):
    """SD spatial transformer: proj_in, self-attn, cross-attn, GEGLU MLP (4c), proj_out."""
    lin = 2.0 * n * c * c
    flops = 2 * lin                          # proj_in, proj_out (linear)
    flops += 4 * lin + 4.0 * n * n * c       # self-attention QKV+out, scores+context
    params = 2 * c * c + 4 * c * c
    if cross:
        flops += 2 * lin + 2 * 2.0 * ctx_tokens * ctx_width * c + 4.0 * n * ctx_tokens * c
        params += 2 * c * c + 2 * ctx_width * c
    flops += 2.0 * n * c * 8 * c + 2.0 * n * 4 * c * c  # GEGLU: c -> 2*4c, 4c -> c
    params += c * 8 * c + 4 * c * c
    act = 34 * BATCH * n * c
    return flops, params, act


def layer(name, kind, flops, params, act, out_bytes, trainable=True):
    entry = {"name": name, "kind": kind, "flops_forward": float("%.4g" % flops), "params": int(params)}
    if trainable:
        entry["activation_bytes"] = int(act)
    entry["output_bytes"] = int(out_bytes)
    return entry


def tensor_bytes(c, hw):
    return BF16 * BATCH * c * hw


def unet_layers(prefix=""):
    """Layers of the SD 2.1 UNet in execution order, with the pending skip tensors."""
    layers = []
    skips = []  # (channels, hw) of encoder outputs waiting for the decoder

    def emit(name, kind, f, p, a, c, hw, push=False, pop=0):
        for _ in range(pop):
            skips.pop()
        if push:
            skips.append((c, hw))
        out = tensor_bytes(c, hw) + sum(tensor_bytes(sc, shw) for sc, shw in skips)
        layers.append(layer(prefix + name, kind, f, p, a, out))

    hw = LATENT * LATENT
    chans = [320, 640, 1280, 1280]
    f, p = conv(4, 320, hw)
    emit("conv_in", "conv", f + 2.0 * (320 * 1280 + 1280 * 1280), p + 320 * 1280 + 1280 * 1280,
         BF16 * BATCH * hw * 4, 320, hw, push=True)
    cin = 320
    for level, c in enumerate(chans):
        hw = (LATENT >> level) ** 2
        for i in range(2):
            f, p, a = resnet(cin, c, hw)
            cin = c
            attn = level < 3
            emit("down%d.res%d" % (level, i), "conv", f, p, a, c, hw, push=not attn)
            if attn:
                f, p, a = transformer(c, hw)
                emit("down%d.attn%d" % (level, i), "attention", f, p, a, c, hw, push=True)
        if level < 3:
            ohw = (LATENT >> (level + 1)) ** 2
            f, p = conv(c, c, ohw)
            emit("down%d.downsample" % level, "conv", f, p, BF16 * BATCH * hw * c, c, ohw, push=True)
    hw = (LATENT >> 3) ** 2
    f, p, a = resnet(1280, 1280, hw)
    emit("mid.res0", "conv", f, p, a, 1280, hw)
    f, p, a = transformer(1280, hw)
    emit("mid.attn", "attention", f, p, a, 1280, hw)
    f, p, a = resnet(1280, 1280, hw)
    emit("mid.res1", "conv", f, p, a, 1280, hw)
    cin = 1280
    for level in range(4):
        c = chans[3 - level]
        hw = (LATENT >> (3 - level)) ** 2
        attn = level > 0
        for i in range(3):
            skip_c = skips[-1][0]
            f, p, a = resnet(cin + skip_c, c, hw)
            cin = c
            emit("up%d.res%d" % (level, i), "conv", f, p, a, c, hw, pop=1)
            if attn:
                f, p, a = transformer(c, hw)
                emit("up%d.attn%d" % (level, i), "attention", f, p, a, c, hw)
        if level < 3:
            ohw = (LATENT >> (2 - level)) ** 2
            f, p = conv(c, c, ohw)
            emit("up%d.upsample" % level, "conv", f, p, BF16 * BATCH * ohw * c, c, ohw)
    hw = LATENT * LATENT
    f, p = conv(320, 4, hw)
    emit("conv_out", "conv", f, p, BF16 * BATCH * hw * 320 * 2, 4, hw)
    assert not skips
    return layers


# The 13 ControlNet residuals (12 encoder skips + middle block) at their resolutions.
CONTROL_RESIDUALS = ([(320, 96 * 96)] * 3 + [(320, 48 * 48), (640, 48 * 48), (640, 48 * 48)] +
                     [(640, 24 * 24), (1280, 24 * 24), (1280, 24 * 24)] + [(1280, 12 * 12)] * 3 +
                     [(1280, 12 * 12)])


def text_encoder():
    return [
        {"name": "token_embedding", "kind": "embedding",
         "transformer": {"hidden": 1024, "seq": TEXT_TOKENS, "heads": 16, "vocab": 49408}},
        {"name": "block", "kind": "transformer", "repeat": 23,
         "transformer": {"hidden": 1024, "seq": TEXT_TOKENS, "heads": 16, "ffn": 4096}},
    ]


def vae_encoder():
    layers = []
    hw = RES * RES
    f, p = conv(3, 128, hw)
    layers.append(layer("conv_in", "conv", f, p, 0, tensor_bytes(128, hw), trainable=False))
    cin = 128
    for level, c in enumerate([128, 256, 512, 512]):
        hw = (RES >> level) ** 2
        for i in range(2):
            f, p, _ = resnet(cin, c, hw, temb=0)
            cin = c
            layers.append(layer("down%d.res%d" % (level, i), "conv", f, p, 0, tensor_bytes(c, hw), trainable=False))
        if level < 3:
            ohw = (RES >> (level + 1)) ** 2
            f, p = conv(c, c, ohw)
            layers.append(layer("down%d.downsample" % level, "conv", f, p, 0, tensor_bytes(c, ohw),
                                trainable=False))
    hw = (RES >> 3) ** 2
    f1, p1, _ = resnet(512, 512, hw, temb=0)
    fa, pa, _ = transformer(512, hw, cross=False)
    # The VAE middle attention is single-head without an MLP: drop the GEGLU part.
    fa -= 2.0 * hw * 512 * 8 * 512 + 2.0 * hw * 4 * 512 * 512
    pa -= 512 * 8 * 512 + 4 * 512 * 512
    layers.append(layer("mid.res0", "conv", f1, p1, 0, tensor_bytes(512, hw), trainable=False))
    layers.append(layer("mid.attn", "attention", fa, pa, 0, tensor_bytes(512, hw), trainable=False))
    layers.append(layer("mid.res1", "conv", f1, p1, 0, tensor_bytes(512, hw), trainable=False))
    f, p = conv(512, 8, hw)
    fq, pq = conv(8, 8, hw, 1)
    # Output: the 4-channel latent sample (mean + noise * std), bf16.
    layers.append(layer("conv_out", "conv", f + fq, p + pq, 0, tensor_bytes(4, hw), trainable=False))
    return layers


def controlnet_layers():
    layers = []
    # Hint encoder: 8 convolutions from the 768x768 condition image down to the 96x96 latent grid.
    hint = [(3, 16, 768), (16, 16, 768), (16, 32, 384), (32, 32, 384), (32, 96, 192), (96, 96, 192),
            (96, 256, 96), (256, 320, 96)]
    for i, (cin, cout, side) in enumerate(hint):
        f, p = conv(cin, cout, side * side)
        layers.append(layer("hint.conv%d" % i, "conv", f, p, BF16 * BATCH * side * side * (cin + cout),
                            tensor_bytes(cout, side * side)))
    # Encoder copy and middle block: same shapes as the UNet's first half.
    unet = unet_layers()
    encoder = [l for l in unet if not l["name"].startswith(("up", "conv_out"))]
    for l in encoder:
        l["name"] = "copy." + l["name"]
    layers += encoder
    # 13 zero convolutions (1x1) produce the residuals added to the UNet skips.
    total_res = sum(tensor_bytes(c, hw) for c, hw in CONTROL_RESIDUALS)
    flops = sum(2.0 * hw * c * c for c, hw in CONTROL_RESIDUALS)
    params = sum(c * c + c for c, _ in CONTROL_RESIDUALS)
    layers.append(layer("zero_convs", "conv", flops, params, total_res, total_res))
    return layers


def model_doc(name, description, components):
    return {"schema": "pipestudio.model/1", "name": name, "description": description,
            "samples_per_microbatch": BATCH, "components": components}


def write(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")
    text = {"name": "text_encoder", "trainable": False, "feeds": ["unet"], "layers": text_encoder()}
    vae = {"name": "vae_encoder", "trainable": False, "feeds": ["unet"], "layers": vae_encoder()}
    unet = {"name": "unet", "trainable": True, "layers": unet_layers()}
    write(os.path.join(root, "stable-diffusion-2.1.json"), model_doc(
        "Stable Diffusion 2.1 (768-v)",
        "Training Stable Diffusion 2.1 at 768x768: the frozen OpenCLIP ViT-H text encoder (23 layers) and "
        "VAE encoder feed the trainable UNet. Per-layer FLOPs, parameters and bytes are estimates computed "
        "from the released configuration by resources/tools/make_diffusion_examples.py.",
        [text, vae, unet]))
    text_c = dict(text, feeds=["controlnet", "unet"])
    vae_c = dict(vae, feeds=["controlnet", "unet"])
    control = {"name": "controlnet", "trainable": True, "feeds": ["unet"], "layers": controlnet_layers()}
    unet_c = {"name": "unet", "trainable": True, "layers": unet_layers()}
    write(os.path.join(root, "controlnet.json"), model_doc(
        "ControlNet on Stable Diffusion 2.1 (768-v)",
        "ControlNet training (Zhang et al. 2023) with the Stable Diffusion decoder unlocked (sd_locked=False): "
        "two trainable backbones, the ControlNet (hint encoder, encoder copy, zero convolutions) feeding the "
        "UNet, plus the frozen text and VAE encoders. Numbers are estimates from the released shapes "
        "(resources/tools/make_diffusion_examples.py).",
        [text_c, vae_c, control, unet_c]))
    # The default workspace opens the SD 2.1 example on the 1x8 A100 cluster (resources/README.md).
    with open(os.path.join(root, "..", "clusters", "a100-1x8-nvlink.json")) as f:
        cluster = json.load(f)
    with open(os.path.join(root, "stable-diffusion-2.1.json")) as f:
        model = json.load(f)
    write(os.path.join(root, "..", "workspaces", "default.pipestudio"), {
        "schema": "pipestudio.workspace/1", "name": "Stable Diffusion 2.1 on 1x8 A100",
        "model": model, "cluster": cluster,
        "solver": {"schedule": "1f1b", "devices": 8, "microbatches": 16, "chunks": 1,
                   "partition": "diffusionpipe", "fill": "greedy"}})


if __name__ == "__main__":
    main()
