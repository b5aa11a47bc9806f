#!/usr/bin/env python3
"""Writes resources/models/cascaded-sd.json: a two-stage cascade trained together.

Cascaded diffusion (Ho et al. 2022, "Cascaded Diffusion Models for High Fidelity Image
Generation", JMLR 23, §3; Imagen, Saharia et al. 2022, §2.5) trains a base model and a
super-resolution model whose conditioning is the *ground-truth* low-resolution image (with
conditioning augmentation), never the base model's output, so the two trainable backbones
have no data flow between them: independent backbones sharing one pipeline.

Shapes reuse make_diffusion_examples.py (same cost formulas, same caveats: ESTIMATES from
the released Stable Diffusion 2.1 configuration, not measurements):
- base_unet: the SD 2.1 UNet at 512x512 images (64x64 latents);
- sr_unet: the same UNet at 1024x1024 (128x128 latents), whose conv_in also takes the
  upsampled low-resolution latent (4 extra input channels, as in SD's x4 upscaler);
- frozen: the OpenCLIP text encoder (feeds both), the VAE encoder at 512 (the base's target
  latents and the SR model's low-resolution condition) and at 1024 (the SR target).

Run: python3 resources/tools/make_cascaded_example.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_diffusion_examples as g  # noqa: E402


def at_resolution(res, build):
    """Calls build() with the generator's resolution globals set to res x res images."""
    saved = g.RES, g.LATENT
    g.RES, g.LATENT = res, res // 8
    try:
        return build()
    finally:
        g.RES, g.LATENT = saved


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")
    base = at_resolution(512, lambda: g.unet_layers())
    sr = at_resolution(1024, lambda: g.unet_layers())
    # The SR UNet's conv_in reads 8 channels: noisy latent + upsampled low-resolution latent.
    hw = (1024 // 8) ** 2
    extra_f, extra_p = g.conv(4, 320, hw)
    sr[0]["flops_forward"] = float("%.4g" % (sr[0]["flops_forward"] + extra_f))
    sr[0]["params"] = int(sr[0]["params"] + extra_p)
    text = {"name": "text_encoder", "trainable": False, "feeds": ["base_unet", "sr_unet"],
            "layers": g.text_encoder()}
    vae_low = {"name": "vae_encoder_512", "trainable": False, "feeds": ["base_unet", "sr_unet"],
               "layers": at_resolution(512, g.vae_encoder)}
    vae_high = {"name": "vae_encoder_1024", "trainable": False, "feeds": ["sr_unet"],
                "layers": at_resolution(1024, g.vae_encoder)}
    g.write(os.path.join(root, "cascaded-sd.json"), g.model_doc(
        "Cascaded SD 2.1 UNets (512 base + 1024 super-resolution)",
        "A base UNet at 512x512 and a super-resolution UNet at 1024x1024 trained together (cascaded "
        "diffusion, Ho et al. 2022): two independent trainable backbones (the SR model is conditioned on the "
        "ground-truth low-resolution latent, not on the base's output), frozen text and VAE encoders. Numbers "
        "are estimates from the SD 2.1 shapes (resources/tools/make_cascaded_example.py).",
        [text, vae_low, vae_high,
         {"name": "base_unet", "trainable": True, "layers": base},
         {"name": "sr_unet", "trainable": True, "layers": sr}]))


if __name__ == "__main__":
    main()
