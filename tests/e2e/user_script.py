"""A user's script: a model with an op the library does not know, then a tuned call."""

import sys

import numpy as np
import torch
from torch import nn

import model_compression_toolkit as mct
from tests.fixtures import digits
from tests.fixtures.damage import outlier_channel
from tests.fixtures.trained import load_trained


class Odd(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.shuffle = nn.PixelShuffle(1)

    def forward(self, x):
        return self.shuffle(torch.relu(self.conv(x)))


x = np.random.default_rng(0).standard_normal((8, 3, 8, 8)).astype(np.float32)
mct.set_log_folder(sys.argv[1])
_, info = mct.ptq.pytorch_post_training_quantization(Odd().eval(), lambda: iter([[x]]))
print("FOLDER", info.log_folder)

x_train, y_train, x_test, y_test = digits.digits_data(channels_last=False)
model, _ = outlier_channel("pytorch", load_trained("pytorch"), x_train[:64])
predict = digits.torch_predict


def accuracy(m) -> float:
    return digits.accuracy(predict(m), x_test, y_test)


_, info = mct.ptq.pytorch_tuned_post_training_quantization(
    model, digits.representative_dataset(x_train), accuracy, mct.core.TuningConfig(max_drop=1.0, max_trials=3)
)
print("FOLDER", info.log_folder)
