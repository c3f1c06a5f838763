"""Softmax under several temperatures: regenerates docs/sampling/softmax_temperature.png.

Eight fixed logits go through `apply_temperature` then `stable_softmax` at temperatures from
0 (greedy: all mass on the argmax) to 4 (close to uniform), drawn as one line per temperature.
Run from the repository root: `python examples/plot_softmax.py`.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # write a file, never open a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from engine.sampling import apply_temperature, stable_softmax  # noqa: E402

LOGITS = np.array([2.0, 1.0, 3.5, 0.5, -1.0, 3.0, 0.0, 1.5])
TEMPERATURES = [0.0, 0.25, 0.5, 1.0, 2.0, 4.0]
OUTPUT = Path(__file__).resolve().parent.parent / "docs" / "sampling" / "softmax_temperature.png"


def main() -> Path:
    token_ids = np.arange(LOGITS.size)
    fig, (ax_logits, ax_probs) = plt.subplots(1, 2, figsize=(10, 4), width_ratios=[1, 2])
    ax_logits.bar(token_ids, LOGITS, color="grey")
    ax_logits.set(title="logits", xlabel="token id", ylabel="logit", xticks=token_ids)
    for temperature, color in zip(TEMPERATURES, plt.cm.viridis(np.linspace(0, 0.9, len(TEMPERATURES)))):
        probs = stable_softmax(apply_temperature(LOGITS, temperature))
        label = "T = 0 (greedy)" if temperature == 0 else f"T = {temperature:g}"
        ax_probs.plot(token_ids, probs, marker="o", color=color, label=label)
    ax_probs.axhline(1 / LOGITS.size, color="grey", linestyle=":", label="uniform")
    ax_probs.set(title="softmax(logits / T)", xlabel="token id", ylabel="probability",
                 xticks=token_ids, ylim=(0, 1.02))
    ax_probs.legend(fontsize="small")
    fig.tight_layout()
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUTPUT, dpi=110)
    plt.close(fig)
    return OUTPUT


if __name__ == "__main__":
    print(f"wrote {main()}")
