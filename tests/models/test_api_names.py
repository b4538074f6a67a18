"""The ecosystem's names on a tiny model: open_clip's encode_image / encode_text, sentence-transformers'
encode_query / encode_document / similarity / decode, single items in, torch sparse COO out on request."""
import numpy as np
import pytest
import torch
from PIL import Image

from tokenspace.sparse import SparseBatch


@pytest.fixture
def model(make_model):
    return make_model()


def _images(n):
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)) for _ in range(n)]


def test_single_text_is_one_row_and_equals_the_list_form(model):
    one = model.encode_text("a red dog")
    both = model.encode_text(["a red dog", "a cat"])
    assert isinstance(one, SparseBatch) and len(one) == 1
    # padding to the longer text moves the float sums by an ulp or so
    np.testing.assert_allclose(one.to_dense()[0], both.to_dense()[0], atol=1e-6)


def test_single_image_is_one_row(model):
    imgs = _images(2)
    one = model.encode_image(imgs[0])
    both = model.encode_image(imgs)
    assert len(one) == 1
    np.testing.assert_allclose(one.to_dense()[0], both.to_dense()[0], atol=1e-6)


def test_query_and_document_are_the_text_and_image_sides(model):
    np.testing.assert_array_equal(model.encode_query(["a cat"]).to_dense(), model.encode_text(["a cat"]).to_dense())
    img = _images(1)
    np.testing.assert_array_equal(model.encode_document(img).to_dense(), model.encode_image(img).to_dense())


def test_sparse_tensor_output_equals_the_dense_rows(model):
    texts = ["a red dog", "a cat on a mat"]
    t = model.encode_text(texts, convert_to_sparse_tensor=True)
    assert t.layout == torch.sparse_coo and t.is_coalesced() and t.shape == (2, len(model.vocab))
    np.testing.assert_array_equal(t.to_dense().numpy(), model.encode_text(texts).to_dense())
    v = model.encode_text("a red dog", convert_to_sparse_tensor=True)
    assert v.shape == (len(model.vocab),)
    np.testing.assert_array_equal(v.to_dense().numpy(), model.encode_text("a red dog").to_dense()[0])


def test_to_torch_sparse_equals_dense_without_warnings(model, recwarn):
    b = model.encode_text(["a red dog", "a cat"])
    s = b.to_torch(sparse=True)
    assert not [w for w in recwarn if "beta" in str(w.message).lower()]
    assert torch.equal(s.to_dense(), b.to_torch())


def test_similarity_is_the_dot_product_of_the_rows(model):
    q = model.encode_text(["a red dog", "a cat"])
    d = model.encode_image(_images(3))
    sim = model.similarity(q, d)
    assert sim.shape == (2, 3)
    np.testing.assert_allclose(sim.numpy(), q.to_dense() @ d.to_dense().T, rtol=1e-5, atol=1e-6)
    # the other input forms give the same matrix
    np.testing.assert_allclose(model.similarity(q.to_torch(sparse=True), d.to_dense()).numpy(), sim.numpy(),
                               rtol=1e-5, atol=1e-6)
    assert model.similarity_fn_name in ("cosine", "dot")
    with pytest.raises(ValueError, match="dimensions"):
        model.similarity(q, np.zeros((1, 3), np.float32))


def test_decode_of_one_vector_is_flat_and_of_a_batch_is_nested(model):
    b = model.encode_text(["a red dog"])
    nested = model.decode(b, top_k=5)
    assert len(nested) == 1 and isinstance(nested[0], list)
    flat = model.decode(model.encode_text("a red dog", convert_to_sparse_tensor=True), top_k=5)
    assert flat == nested[0]
    assert model.decode(b.to_torch()[0], top_k=5) == nested[0]


def test_bad_text_inputs_are_refused_clearly(model):
    with pytest.raises(ValueError, match="empty text"):
        model.encode_text(["a dog", "  "])
    with pytest.raises(TypeError, match="strings"):
        model.encode_text([3])


def test_a_batch_tensor_of_images_gives_one_sparse_row_per_image(model):
    """model.preprocess's [N, 3, H, W] is N images: the sparse tensor has N rows, as for the list (not the
    first row alone, as for one image), and batch_size slices it as it slices a list."""
    imgs = _images(3)
    want = model.encode_image(imgs).to_dense()
    pixels = model.preprocess(imgs)
    for batch_size in (64, 2):
        t = model.encode_image(pixels, batch_size=batch_size, convert_to_sparse_tensor=True)
        assert t.layout == torch.sparse_coo and t.shape == (3, len(model.vocab))
        np.testing.assert_allclose(t.to_dense().numpy(), want, atol=1e-6)
    one = model.encode_image(pixels[1], convert_to_sparse_tensor=True)  # one image's [3, H, W]: one vector
    assert one.shape == (len(model.vocab),)
    np.testing.assert_allclose(one.to_dense().numpy(), want[1], atol=1e-6)
