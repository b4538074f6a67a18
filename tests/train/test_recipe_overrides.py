"""Recipe overrides are read, never altered: one overrides dict can build several recipes."""
from tokenspace.train.recipe import Recipe


def test_loss_override_is_not_consumed():
    loss = {"lambda_image": 1e-2, "lambda_text": 1e-2, "flops_warmup": 100}
    first = Recipe.load("stair-emoji", loss=loss)
    second = Recipe.load("stair-emoji", loss=loss)
    assert loss == {"lambda_image": 1e-2, "lambda_text": 1e-2, "flops_warmup": 100}
    assert first.lambda_image == second.lambda_image == 1e-2
    assert first.flops_warmup == second.flops_warmup == 100
