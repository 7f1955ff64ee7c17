"""networks.costs: each layer's FLOPs and activation size, against figures worked by hand and the
published multiply-add counts of the networks."""

import pytest

import networks
from networks.costs import activation_elements, has_costs, layer_costs, layer_name, step_flops


def test_mlp_by_hand():
    # 784 -> 128 -> 64 -> 10 at batch 4: fc1 forward is 2 x 4 x 784 x 128 + 4 x 128 (its bias).
    layers = layer_costs("mlp", (1, 28, 28), 10, batch_size=4)
    assert [l.name for l in layers] == ["fc1", "fc2", "fc3"]
    assert layers[0].arrays == ("fc1_weight", "fc1_bias")
    assert layers[0].forward_flops == 2 * 4 * 784 * 128 + 4 * 128
    assert layers[0].backward_flops == layers[0].forward_flops       # no input gradient
    assert layers[1].backward_flops == 2 * layers[1].forward_flops
    assert [l.activation_elements for l in layers] == [4 * 128, 4 * 64, 4 * 10]


def test_a_conv_counts_its_output_positions():
    # LeNet at 28x28: conv0 5x5 -> 24x24 (576 positions), 20 filters of 1x5x5.
    first = layer_costs("lenet", (1, 28, 28), 10, batch_size=1)[0]
    assert first.forward_flops == 2 * 576 * 20 * 25 + 576 * 20
    assert first.activation_elements == 20 * 576


@pytest.mark.parametrize("network,shape,depth,gmacs", [
    ("resnet", (3, 224, 224), 50, 4.09),          # ResNet-50: 4.1 GMAC per 224 image
    ("inception-v3", (3, 299, 299), None, 5.71),  # Inception v3: 5.7 GMAC per 299 image
    ("vgg", (3, 224, 224), 16, 15.48),            # VGG-16: 15.5 GMAC
    ("mobilenet", (3, 224, 224), None, 0.569),    # MobileNet v1: 569 M multiply-adds
])
def test_published_multiply_adds(network, shape, depth, gmacs):
    forward, backward = step_flops(layer_costs(network, shape, 1000, depth, batch_size=1))
    assert forward / 2e9 == pytest.approx(gmacs, rel=0.01)
    assert forward * 2 > backward > forward


def test_batch_scales_every_figure():
    one = layer_costs("resnet", (3, 224, 224), 1000, 50, batch_size=1)
    many = layer_costs("resnet", (3, 224, 224), 1000, 50, batch_size=16)
    assert [16 * l.forward_flops for l in one] == [l.forward_flops for l in many]
    assert activation_elements(many) == 16 * activation_elements(one)


def test_every_array_is_in_one_layer_in_order():
    for network in ("resnet", "inception-v3", "bert-base", "gpt2", "llama-1b", "vit-b16"):
        layers = layer_costs(network, (3, 224, 224) if network != "inception-v3" else
                             (3, 299, 299), 1000, batch_size=1)
        arrays = [a for l in layers for a in l.arrays]
        assert arrays == [a for a, _ in networks.get_shapes(
            network, (3, 299, 299) if network == "inception-v3" else (3, 224, 224), 1000)]


def test_transformer_attention_and_embeddings():
    # BERT-base at 512 tokens: 85 M weights of its encoder x 512 tokens plus attention's
    # 2 x 512^2 x 768 multiply-adds per layer; the embeddings are lookups.
    layers = {l.name: l for l in layer_costs("bert-base", batch_size=1, seq_len=512)}
    assert layers["embeddings.word_embeddings"].forward_flops == 0
    query = layers["encoder.layer.0.attention.self.query"]
    assert query.forward_flops == 2 * 512 * 768 * 768 + 512 * 768 + 4 * 512 * 512 * 768
    short = {l.name: l for l in layer_costs("bert-base", batch_size=1, seq_len=128)}
    assert short["pooler.dense"].forward_flops == layers["pooler.dense"].forward_flops


def test_no_geometry_is_refused_with_the_way_out():
    assert not has_costs("googlenet")
    with pytest.raises(networks.NetworkError, match="--compute-ms"):
        layer_costs("googlenet")


def test_layer_names():
    assert layer_name("fc1_bias") == "fc1"
    assert layer_name("h.0.attn.c_attn.weight") == "h.0.attn.c_attn"
    assert layer_name("vit.embeddings.cls_token") == "vit.embeddings.cls_token"
