"""Stage 2 on the GPU (decode="cuda"): a batched JPEG decoder, then crop/resize/flip.

Workers only screen and pack compressed bytes into the page-locked arena of each batch buffer
(JPEGs are ~5x smaller than their pixels), with each training crop box drawn from the header;
images the GPU decoders cannot take were decoded by the workers on the CPU and arrive as pixels
(decode.JpegPacker). Here, on the loader's side stream:

    arena bytes --batched decoder (gpujpeg.py)--> full images --crop, resize, flip--> batch

With nvImageCodec's one C call (nvbatch.py) a training batch goes through as arrays: the JPEGs'
addresses in the arena in, one DecodedBatch's geometry rows out and into the crop kernel, no
Python object per image (the lanes' Python held the training process's GIL ~2.5x as long
before, scripts/bench/results/2026-11-29-h200-onecall); images go one by one only where a JPEG
is decoded again, for evaluation's resize and for roi_align.

The geometry is the CPU path's, drawn from the same per-sample seed: RandomResizedCrop box and
flip for training, torchvision's Resize + CenterCrop integers for evaluation. Decoded full-size
images are transient: only the (N, C, H, W) batch outlives a call, so GPU memory stays flat.
"""
from __future__ import annotations

import logging
from collections import Counter, defaultdict

import numpy as np
import torch
import torch.nn.functional as F
from torchvision.ops import roi_align

from . import gpucrop
from .batch import FALLBACK
from .decode import Decoder, center_crop_geometry
from .gpujpeg import JpegDecoder
from .nvbatch import DecodedBatch
from .errors import SampleError
from .prefetch import small_to_device

log = logging.getLogger(__name__)


def choose_crop(crop: str, device: torch.device) -> str:
    """"triton" (gpucrop's one kernel) or "roi_align" (torchvision ops, any device)."""
    if crop not in ("auto", "triton", "roi_align"):
        raise ValueError(f'gpu_crop must be "auto", "triton" or "roi_align", got {crop!r}')
    if crop == "auto":
        return "triton" if gpucrop.available(device) else "roi_align"
    if crop == "triton" and not gpucrop.available(device):
        raise RuntimeError(f"gpu_crop='triton' needs Triton and a CUDA device (got {device})")
    return crop


class Packed:
    """A packed host batch on its way to the GPU. Deliberately not a tensor container, so the
    prefetcher hands it to `GpuDecode` as is (nvJPEG reads the bytes from host memory)."""

    def __init__(self, buf):
        self.buf = buf


class GpuDecode:
    """Prefetch item transform for packed batches -> (images uint8 NCHW or normalized, labels)."""

    def __init__(self, cpu: Decoder, normalize, device: torch.device,
                 decoders: list[JpegDecoder], crop: str = "auto"):
        self.cpu, self.normalize, self.device = cpu, normalize, device
        self.augment = cpu.augment  # the same geometry as the CPU path
        if not decoders:
            raise ImportError("no GPU JPEG decoder is installed: pip install "
                              "nvidia-nvimgcodec-cu13 nvidia-nvjpeg, or torchcodec")
        self.jpeg = decoders[0]  # the preferred one (gpujpeg.available)
        self._last_done = None  # event after the last batch's crops (see _wait_for_last_batch)
        self.crop = choose_crop(crop, device)
        self._crop_chosen_by_us = crop == "auto"
        # Reported like the workers' counts: skip reasons as they are, the rest under FALLBACK.
        self.counts: Counter = Counter()
        self._refused_reported = 0  # of self.jpeg.refused (the engines' refusals)

    def __call__(self, packed: Packed):
        buf = packed.buf
        n, arrays = buf.count, buf.arrays
        self._wait_for_last_batch()
        out = torch.empty((n, *self.cpu.out_shape), dtype=torch.uint8, device=self.device)
        keep = self._copy_cpu_decoded(buf, out) + self._decode_packed(arrays, out, n)
        self._mark_batch_done()
        labels = buf.labels[:n].to(self.device, non_blocking=True)
        if len(keep) < n:  # images neither nvJPEG nor Pillow could decode: drop, counted
            index = self._small(sorted(keep), torch.long)
            out, labels = out[index], labels[index]
        images = out.permute(0, 3, 1, 2)  # NCHW view of NHWC memory: channels_last
        if self.normalize is not None:
            images = self.normalize(images)
        return images, labels

    def warm(self) -> None:
        """The training crops once on a small image: Triton builds or loads its kernel on the
        first launch in a process (~0.5 s on an H200 host), which the loader pays while its
        workers start rather than on the first batch. Where the kernel fails, "auto" falls
        back to roi_align here, as it would on that batch; an explicit "triton" raises there,
        on the batch, not here."""
        if self.crop != "triton":
            return
        with torch.cuda.device(self.device):  # Triton launches on the current device
            image = torch.zeros((self.cpu.channels, 8, 8), dtype=torch.uint8,
                                device=self.device)
            out = torch.empty((1, *self.cpu.out_shape), dtype=torch.uint8, device=self.device)
            try:
                self.train_crops([(0, image)], np.array([[0, 0, 8, 8, 0]], np.float32), out)
            except Exception as error:  # the first batch meets it again and raises
                log.debug("imageloader: warming the crops failed: %s", error)

    def _wait_for_last_batch(self) -> None:
        """torchvision's decoder writes its outputs from a stream of its own, not ours: into
        memory the caching allocator may just have handed back from the last batch's images,
        whose crops can still be queued behind other work on our stream. Seen on the H200
        with our stream kept busy: the last batch's crops read this batch's pixels
        (test_a_busy_gpu_never_lets...). So before such a decoder runs, the host waits for
        the last batch's crops (one batch deep: the stream rarely holds more). Decoders that
        work in our stream's order (nvImageCodec, TorchCodec) need no wait."""
        if self._last_done is not None and not getattr(self.jpeg, "stream_ordered", False):
            self._last_done.synchronize()

    def _mark_batch_done(self) -> None:
        if self.device.type == "cuda":
            self._last_done = torch.cuda.Event()
            self._last_done.record(torch.cuda.current_stream(self.device))

    def _copy_cpu_decoded(self, buf, out) -> list[int]:
        slots = np.flatnonzero(buf.arrays.lengths[:buf.count] == 0).tolist()
        for slot in slots:  # rare: one row each, from page-locked memory, asynchronous
            out[slot].copy_(buf.images[slot], non_blocking=True)
        return slots

    def _decode_packed(self, arrays, out, n) -> list[int]:
        slots = np.flatnonzero(arrays.lengths[:n] > 0)
        if not slots.size:
            return []
        batch = self._decode_in_one_call(arrays, slots)
        if batch is not None and batch.done.all() and self.augment.train and \
                self._crop_by_address(
                    gpucrop.upright_geometry(batch.geometry, self._orientations(arrays)[slots]),
                    self._boxes_in_regions(arrays.boxes, slots, batch.origins), slots, out):
            self.counts[FALLBACK + "gpu_decoded"] += len(slots)
            return slots.tolist()
        return self._decode_one_by_one(arrays, slots.tolist(), out, batch)

    def _decode_one_by_one(self, arrays, slots: list[int], out, batch) -> list[int]:
        """Image by image: a JPEG to decode again (refused, or a header that did not parse),
        evaluation's resize, roi_align's crops, or a decoder without the one-call batch
        (`batch` None: it decodes a list of arrays here)."""
        datas = [self._jpeg_bytes(arrays, s) for s in slots]
        if batch is None:
            images = self._decode_list(datas, arrays, slots)
        else:
            images = self._decode_again_together(batch.images(), datas)
        images = [image if image is not None else self._decode_one(data, int(arrays.seeds[s]))
                  for image, data, s in zip(images, datas, slots)]
        boxes = self._boxes_in_images(arrays.boxes, slots, images)
        orientations = self._orientations(arrays)
        kept, to_crop = [], []
        for slot, image in zip(slots, images):
            if image is None:
                continue
            kept.append(slot)
            if isinstance(image, np.ndarray):  # decoded by Pillow after the GPU refused it
                out[slot].copy_(torch.from_numpy(image))  # (turned upright there too)
            elif self.augment.train:
                to_crop.append((slot, image))
            else:
                upright = gpucrop.upright_tensor(self._tensor(image), orientations[slot])
                out[slot].copy_(self._center_crop(upright))
        self.train_crops(to_crop, boxes, out, orientations)
        by_pillow = sum(isinstance(image, np.ndarray) for image in images)
        self.counts[FALLBACK + "gpu_decoded"] += len(kept) - by_pillow
        return kept

    def _decode_in_one_call(self, arrays, slots: np.ndarray):
        """The packed JPEGs of `slots` as one nvbatch.DecodedBatch, read in place from the
        page-locked arena (no array per JPEG), or None where the lane's decoder has no such
        call (it then decodes a list of arrays)."""
        decode_at = getattr(self.jpeg, "decode_at", None)
        if decode_at is None:
            return None
        arena = arrays.arena
        starts = (arena.__array_interface__["data"][0] + arrays.offsets[slots]).astype(np.uint64)
        try:
            return decode_at(starts, arrays.lengths[slots].astype(np.int64),
                             **self._regions_wanted(arrays, slots))
        except RuntimeError as error:  # the batch call fails as a whole: find the culprits
            log.info("batched GPU decode failed (%s); decoding one by one", error)
            return DecodedBatch.nothing(len(slots), self.cpu.channels)

    def _orientations(self, arrays) -> np.ndarray:
        """Per slot the EXIF orientation the crops read the decoded image by: the packers',
        unless this lane's decoder turned its images upright itself (TorchCodec's does)."""
        orientations = arrays.orientations
        if (orientations == 1).all() or not getattr(self.jpeg, "turns_upright", False):
            return orientations
        return np.ones_like(orientations)

    @staticmethod
    def _jpeg_bytes(arrays, slot: int) -> np.ndarray:
        start = int(arrays.offsets[slot])
        return arrays.arena[start:start + int(arrays.lengths[slot])]

    def _regions_wanted(self, arrays, slots) -> dict:
        """The crop boxes for decoders that decode large images as their crop's region only
        (nvbatch's experiment, off by default): training crops, not evaluation's resize.
        A rotated JPEG's box is drawn upright, not in the frame it is decoded in: it is
        decoded whole (a box past every edge)."""
        if not (self.augment.train and getattr(self.jpeg, "regions_from", None)):
            return {}
        boxes = arrays.boxes[slots, :4].copy()
        boxes[arrays.orientations[slots] != 1] = (0, 0, np.inf, np.inf)
        return {"boxes": boxes}

    def _decode_again_together(self, images: list, datas: list) -> list:
        """The JPEGs the one call left undecoded (None), once more in one call of their own,
        into new memory (the kept buffer holds the batch's other images): the lane's decoder
        sends what the hardware engines refuse to its other backends there, all at once, as
        its `decode` does for a list. A single one goes straight to `_decode_one`."""
        again = [k for k, image in enumerate(images) if image is None]
        if len(again) < 2:
            return images
        try:
            redone = self.jpeg.decode([datas[k] for k in again], fresh=True)
        except RuntimeError as error:  # each alone next (_decode_one)
            log.info("decoding %d JPEGs again failed (%s); one by one", len(again), error)
            return images
        for k, image in zip(again, redone):
            images[k] = image
        return images

    def _decode_list(self, datas, arrays, slots) -> list:
        try:
            return self.jpeg.decode(datas, **self._regions_wanted(arrays, slots))
        except RuntimeError as error:  # the batch call fails as a whole: find the culprits
            log.info("batched GPU decode failed (%s); decoding one by one", error)
            return [None] * len(datas)

    @staticmethod
    def _boxes_in_images(boxes: np.ndarray, slots: list[int], images: list) -> np.ndarray:
        """`_boxes_in_regions` for a list of images (a region's image has an `origin`)."""
        moved = [(slot, image.origin) for slot, image in zip(slots, images)
                 if getattr(image, "origin", (0, 0)) != (0, 0)]
        if not moved:
            return boxes
        return GpuDecode._boxes_in_regions(boxes, np.array([slot for slot, _ in moved]),
                                           np.array([origin for _, origin in moved]))

    @staticmethod
    def _boxes_in_regions(boxes: np.ndarray, slots: np.ndarray,
                          origins: np.ndarray) -> np.ndarray:
        """The crop boxes relative to what was decoded: a region decoded alone starts at its
        origin (top, left) in the whole image (origins[i] for slots[i]); other images at
        (0, 0)."""
        if not origins.any():
            return boxes
        boxes = boxes.copy()
        boxes[slots[:, None], [0, 2]] -= origins[:, 1:2]  # left
        boxes[slots[:, None], [1, 3]] -= origins[:, 0:1]  # top
        return boxes

    def _decode_one(self, data: np.ndarray, seed: int):
        try:  # fresh: not into the memory that holds this batch's other images
            image = self.jpeg.decode([data], fresh=True)[0]
        except RuntimeError:
            image = None
        if image is None:
            pixels = np.empty(self.cpu.out_shape, np.uint8)
            try:
                self.cpu(data.tobytes(), pixels, seed)
            except SampleError as error:
                self.counts[error.reason] += 1  # neither nvJPEG nor Pillow: skipped
                return None
            self.counts[FALLBACK + "gpu_refused"] += 1
            return pixels
        return image

    def train_crops(self, pairs, boxes, out, orientations: np.ndarray | None = None) -> None:
        """Each (slot, image) cropped to the box the packers drew, resized, flipped, into out
        (public for scripts/bench/bench_gpu_crop.py, which times it alone); `orientations`
        (per slot, EXIF's): the images read upright, the frame of their boxes."""
        if not pairs:
            return
        slots = [slot for slot, _ in pairs]
        turned = orientations is not None and bool((orientations[slots] != 1).any())
        images = [image for _, image in pairs]
        if turned and self.crop == "triton":  # it reads geometry rows as images: upright
            images = gpucrop.upright_geometry([gpucrop.image_geometry(i) for i in images],
                                              orientations[slots])
        if self._crop_by_address(images, boxes, slots, out):
            return
        by_size = defaultdict(list)
        for slot, image in pairs:
            image = self._tensor(image)
            if turned:
                image = gpucrop.upright_tensor(image, orientations[slot])
            by_size[tuple(image.shape)].append((slot, image))
        for group in by_size.values():
            self._random_resized_crops(group, boxes, out)

    def _crop_by_address(self, images, boxes, slots, out) -> bool:
        """gpucrop's one kernel for the whole batch, from the uint8 images (a list, or their
        geometry rows: it reads them by address and strides, nvImageCodec's need no tensor);
        False where the crops are roi_align's (nothing was written)."""
        if self.crop != "triton":
            return False
        try:
            gpucrop.crop_resize_flip(images, boxes[slots], slots, out)
            return True
        except Exception as error:
            # Triton compiles on first use and needs a C compiler for its launcher: where
            # that fails, "auto" falls back to roi_align (the batch is redone, nothing was
            # written); an explicit gpu_crop="triton" raises.
            if not self._crop_chosen_by_us:
                raise
            log.warning("imageloader: the Triton crop kernel failed (%s); cropping with "
                        "roi_align from now on", error)
            self.crop = "roi_align"
            return False

    def _random_resized_crops(self, group, boxes, out) -> None:
        """Crop, resize and flip same-sized images with a handful of kernels, not per image.

        The packers drew each crop box and flip (decode.JpegPacker), with the CPU path's draws.
        roi_align samples each output pixel's area ceil(crop / output) times per axis and
        averages bilinear samples: on downscaling that is an area filter where Pillow uses a
        triangle; differences are a few levels, in a random augmentation.
        """
        slots = [slot for slot, _ in group]
        rows = boxes[slots]                                   # (n, 5): l, t, r, b, flip
        rois = np.concatenate([np.arange(len(slots), dtype=np.float32)[:, None], rows[:, :4]],
                              axis=1)
        stack = torch.stack([image for _, image in group]).float()
        crops = roi_align(stack, self._small(rois, torch.float32), output_size=self.augment.size,
                          spatial_scale=1.0, sampling_ratio=-1, aligned=True)
        flipped = self._small(rows[:, 4] > 0.5, torch.bool).view(-1, 1, 1, 1)
        crops = torch.where(flipped, crops.flip(-1), crops)
        pixels = crops.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
        out[self._small(slots, torch.long)] = pixels

    def _tensor(self, image) -> torch.Tensor:
        """A decoder's (C, H, W) output as a tensor: nvImageCodec's images are viewed in
        place (CUDA array interface, or the array interface of the CPU backend's)."""
        if isinstance(image, torch.Tensor):
            return image
        if self.device.type == "cuda":
            return torch.as_tensor(image, device=self.device)
        return torch.from_numpy(np.asarray(image))

    def _small(self, values, dtype) -> torch.Tensor:
        return small_to_device(np.asarray(values), self.device, dtype)

    def _center_crop(self, image: torch.Tensor) -> torch.Tensor:
        """torchvision's Resize + CenterCrop on one image, as the CPU eval path does."""
        height, width = image.shape[-2:]
        out_hw = self.augment.size
        new_w, new_h, left, top = center_crop_geometry((width, height), out_hw,
                                                       self.augment.crop_fraction)
        x = F.interpolate(image[None].float(), size=(new_h, new_w), mode="bilinear",
                          antialias=True, align_corners=False)
        x = x[0, :, top:top + out_hw[0], left:left + out_hw[1]]
        return x.round_().clamp_(0, 255).to(torch.uint8).permute(1, 2, 0)

    def take_counts(self) -> dict:
        # JPEGs the hardware engines refused and nvImageCodec's other backends decoded on the
        # GPU (also in "gpu_decoded"): a layout the engines lack, a slower path to know of.
        refused = getattr(self.jpeg, "refused", 0)
        if refused > self._refused_reported:
            self.counts[FALLBACK + "engines_refused"] += refused - self._refused_reported
            self._refused_reported = refused
        counts, self.counts = dict(self.counts), Counter()
        return counts
