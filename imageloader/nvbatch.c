/* One C call per batch into nvImageCodec's C API (imageloader/nvbatch.py builds and drives it).
 *
 * The Python way makes, per JPEG, an nv.CodeStream object and, after decoding, reads each image's
 * address through its __cuda_array_interface__: ~500 Python calls per 256-image batch, 20-40% of a
 * decoding lane's thread (scripts/bench/results/2026-11-26-h200-spy). Here a batch is addresses
 * and sizes: code streams and images are kept handles, re-initialised in place for each batch
 * (nvImageCodec reuses a non-NULL handle), and the outputs are planar at caller-given addresses
 * (one buffer, offsets computed in numpy). ctypes releases the GIL for each call. */
#include <stddef.h> /* before nvimgcodec.h, which uses ptrdiff_t without it */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <nvimgcodec.h>

typedef struct {
    nvimgcodecInstance_t instance;
    nvimgcodecDecoder_t decoder;
    int capacity;                    /* handles kept below */
    nvimgcodecCodeStream_t* streams;
    nvimgcodecCodeStream_t* regions; /* sub-code streams: a region of streams[i] */
    nvimgcodecImage_t* images;
    int32_t* parsed;                 /* PARSED ints per stream as bd_parse read them: height,
                                      * width, chroma subsampling, colour spec (nvImageCodec's) */
    int on_device;
} Batcher;

/* bd_decode's answer to sizes or regions that do not fit the parsed JPEGs: decoding would write
 * past the caller's buffers, so nothing is decoded. */
#define BD_SIZES_MISMATCH (-2)
#define PARSED 4
#define LOAD_HINT_ALL 100000.0f

void bd_destroy(Batcher* b);

static void zero_info(nvimgcodecImageInfo_t* info) {
    memset(info, 0, sizeof(*info));
    info->struct_type = NVIMGCODEC_STRUCTURE_TYPE_IMAGE_INFO;
    info->struct_size = sizeof(*info);
}

/* backend: an nvimgcodecBackendKind_t (1 CPU, 2 GPU, 3 hybrid, 4 hardware engines), or 0 for
 * every backend, nvImageCodec choosing per image; fallback: a second kind for the JPEGs the
 * first refuses, decoded in the decoder's threads while the first decodes the rest, or 0 for
 * none; device: a CUDA device index, or NVIMGCODEC_DEVICE_CPU_ONLY. Returns 0 and *out, or an
 * nvImageCodec status (-1: no memory). */
int bd_create(const char* extensions, int device, int backend, int fallback, int threads,
              const char* options, int capacity, Batcher** out) {
    Batcher* b = calloc(1, sizeof(Batcher));
    if (!b) return -1;
    nvimgcodecInstanceCreateInfo_t create = {NVIMGCODEC_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                             sizeof(create), NULL};
    create.load_builtin_modules = 1;
    create.load_extension_modules = 1;
    create.extension_modules_path = extensions;
    int status = nvimgcodecInstanceCreate(&b->instance, &create);
    if (status != NVIMGCODEC_STATUS_SUCCESS) { free(b); return status; }
    nvimgcodecBackend_t kinds[2];
    int kind_of[2] = {backend, fallback};
    for (int k = 0; k < 2; k++) {
        nvimgcodecBackend_t kind = {NVIMGCODEC_STRUCTURE_TYPE_BACKEND, sizeof(kind), NULL};
        kind.kind = (nvimgcodecBackendKind_t)kind_of[k];
        kind.params.struct_type = NVIMGCODEC_STRUCTURE_TYPE_BACKEND_PARAMS;
        kind.params.struct_size = sizeof(kind.params);
        kind.params.load_hint = 1.0f;
        kinds[k] = kind;
    }
    /* The load hint is the share of each batch the first backend takes before the fallback
     * gets the rest, fixed by the decoder's first call: a batch larger than that first one
     * would overflow to the fallback (and the engines' first call is gpujpeg's probe, one
     * JPEG). Far above 1, the first takes every JPEG it can. */
    if (fallback) kinds[0].params.load_hint = LOAD_HINT_ALL;
    nvimgcodecExecutionParams_t exec = {NVIMGCODEC_STRUCTURE_TYPE_EXECUTION_PARAMS, sizeof(exec),
                                        NULL};
    exec.device_id = device;
    exec.max_num_cpu_threads = threads;
    exec.num_backends = backend ? (fallback ? 2 : 1) : 0;
    exec.backends = backend ? kinds : NULL;
    status = nvimgcodecDecoderCreate(b->instance, &b->decoder, &exec, options);
    if (status != NVIMGCODEC_STATUS_SUCCESS) {
        nvimgcodecInstanceDestroy(b->instance);
        free(b);
        return status;
    }
    b->capacity = capacity;
    b->streams = calloc(capacity, sizeof(nvimgcodecCodeStream_t));
    b->regions = calloc(capacity, sizeof(nvimgcodecCodeStream_t));
    b->images = calloc(capacity, sizeof(nvimgcodecImage_t));
    b->parsed = calloc(PARSED * (size_t)capacity, sizeof(int32_t));
    if (!b->streams || !b->regions || !b->images || !b->parsed) {
        bd_destroy(b);
        return -1;
    }
    b->on_device = device != NVIMGCODEC_DEVICE_CPU_ONLY;
    *out = b;
    return 0;
}

/* Room for batches of `capacity` JPEGs: more kept handles (the new ones NULL until used). */
int bd_reserve(Batcher* b, int capacity) {
    if (capacity <= b->capacity) return 0;
    nvimgcodecCodeStream_t* streams = realloc(b->streams, sizeof(*streams) * capacity);
    if (streams) b->streams = streams;
    nvimgcodecCodeStream_t* regions = realloc(b->regions, sizeof(*regions) * capacity);
    if (regions) b->regions = regions;
    nvimgcodecImage_t* images = realloc(b->images, sizeof(*images) * capacity);
    if (images) b->images = images;
    int32_t* parsed = realloc(b->parsed, sizeof(*parsed) * PARSED * (size_t)capacity);
    if (parsed) b->parsed = parsed;
    if (!streams || !regions || !images || !parsed) return -1;
    size_t more = (size_t)(capacity - b->capacity);
    memset(streams + b->capacity, 0, sizeof(*streams) * more);
    memset(regions + b->capacity, 0, sizeof(*regions) * more);
    memset(images + b->capacity, 0, sizeof(*images) * more);
    memset(parsed + PARSED * (size_t)b->capacity, 0, sizeof(*parsed) * PARSED * more);
    b->capacity = capacity;
    return 0;
}

/* Parse n JPEGs at addresses[i] (lengths[i] bytes): sizes[2i], sizes[2i+1] = height,
 * width, or 0, 0 where the header cannot be parsed. The parsed streams are kept for bd_decode. */
int bd_parse(Batcher* b, const uint64_t* addresses, const int64_t* lengths, int n,
             int32_t* sizes) {
    if (n > b->capacity) return -1;
    for (int i = 0; i < n; i++) {
        int32_t* parsed = b->parsed + PARSED * i;
        sizes[2 * i] = sizes[2 * i + 1] = 0;
        memset(parsed, 0, sizeof(*parsed) * PARSED);
        const unsigned char* data = (const unsigned char*)(uintptr_t)addresses[i];
        if (nvimgcodecCodeStreamCreateFromHostMem(b->instance, &b->streams[i], data,
                                                  (size_t)lengths[i], NULL)
            != NVIMGCODEC_STATUS_SUCCESS)
            continue;
        nvimgcodecImageInfo_t info;
        zero_info(&info);
        if (nvimgcodecCodeStreamGetImageInfo(b->streams[i], &info) != NVIMGCODEC_STATUS_SUCCESS)
            continue;
        sizes[2 * i] = parsed[0] = (int32_t)info.plane_info[0].height;
        sizes[2 * i + 1] = parsed[1] = (int32_t)info.plane_info[0].width;
        parsed[2] = (int32_t)info.chroma_subsampling;
        parsed[3] = (int32_t)info.color_spec;
    }
    return 0;
}

/* Whether JPEG i is decoded as a region (regions[4i..4i+3]: top, left, bottom, right) rather
 * than whole: one test for the size check and the decode, so both read the same rows. */
static int has_region(const int32_t* regions, int i) {
    return regions && regions[4 * i + 2] > 0;
}

/* Whether output i (h x w) is what decoding JPEG i gives: its parsed size (0 x 0: not parsed,
 * not decoded), or its region's, the region inside the image. The caller computes both from
 * bd_parse's sizes; checked here because a wrong size makes the decoder write past the
 * caller's buffer (a1fde3b: sizes read from freed memory did, on photos). */
static int fits(const Batcher* b, int i, int32_t h, int32_t w, const int32_t* regions) {
    int32_t height = b->parsed[PARSED * i], width = b->parsed[PARSED * i + 1];
    if (!has_region(regions, i)) return h == height && w == width;
    const int32_t* r = regions + 4 * i;  /* top, left, bottom, right */
    return 0 <= r[0] && r[0] < r[2] && r[2] <= height && 0 <= r[1] && r[1] < r[3]
           && r[3] <= width && h == r[2] - r[0] && w == r[3] - r[1];
}

/* The code stream to decode for JPEG i: its region top, left, bottom, right (regions[4i..4i+3],
 * in pixels, half-open) as a sub-code stream where regions is given and that row's bottom > 0,
 * else the whole image. NULL where the sub-code stream could not be made. */
static nvimgcodecCodeStream_t stream_of(Batcher* b, int i, const int32_t* regions) {
    if (!has_region(regions, i)) return b->streams[i];
    nvimgcodecCodeStreamView_t view;
    memset(&view, 0, sizeof(view));
    view.struct_type = NVIMGCODEC_STRUCTURE_TYPE_CODE_STREAM_VIEW;
    view.struct_size = sizeof(view);
    view.region.struct_type = NVIMGCODEC_STRUCTURE_TYPE_REGION;
    view.region.struct_size = sizeof(view.region);
    view.region.ndim = 2;
    view.region.start[0] = regions[4 * i];      /* y */
    view.region.start[1] = regions[4 * i + 1];  /* x */
    view.region.end[0] = regions[4 * i + 2];
    view.region.end[1] = regions[4 * i + 3];
    if (nvimgcodecCodeStreamGetSubCodeStream(b->streams[i], &b->regions[i], &view)
        != NVIMGCODEC_STATUS_SUCCESS)
        return NULL;
    return b->regions[i];
}

/* The layout of parsed JPEG i: layout[2i] its chroma subsampling, layout[2i+1] its colour
 * spec (nvimgcodecChromaSubsampling_t, nvimgcodecColorSpec_t; 0, 0 where it did not parse). */
int bd_layout(Batcher* b, int n, int32_t* layout) {
    if (n > b->capacity) return -1;
    for (int i = 0; i < n; i++) {
        layout[2 * i] = b->parsed[PARSED * i + 2];
        layout[2 * i + 1] = b->parsed[PARSED * i + 3];
    }
    return 0;
}

/* Height and width of the chroma planes that nvJPEG writes for an h x w JPEG with this chroma
 * subsampling (rounded up, as its MCUs are); 0 for a subsampling the hardware engines refuse. */
static int chroma_size(int sampling, int32_t h, int32_t w, int32_t* ch, int32_t* cw) {
    switch (sampling) {
    case NVIMGCODEC_SAMPLING_444: *ch = h; *cw = w; return 1;
    case NVIMGCODEC_SAMPLING_422: *ch = h; *cw = (w + 1) / 2; return 1;
    case NVIMGCODEC_SAMPLING_420: *ch = (h + 1) / 2; *cw = (w + 1) / 2; return 1;
    case NVIMGCODEC_SAMPLING_440: *ch = (h + 1) / 2; *cw = w; return 1;
    default: return 0;
    }
}

/* Whether output i's chroma planes (chroma[2i], chroma[2i+1]) are what JPEG i, coded in YCbCr,
 * decodes to: anything else would make the decoder write past the caller's buffer. */
static int chroma_fits(const Batcher* b, int i, const int32_t* chroma) {
    const int32_t* parsed = b->parsed + PARSED * i;
    int32_t ch, cw;
    return parsed[3] == NVIMGCODEC_COLORSPEC_SYCC
           && chroma_size(parsed[2], parsed[0], parsed[1], &ch, &cw)
           && chroma[2 * i] == ch && chroma[2 * i + 1] == cw;
}

static void set_plane(nvimgcodecImagePlaneInfo_t* plane, uint32_t h, uint32_t w) {
    plane->struct_type = NVIMGCODEC_STRUCTURE_TYPE_IMAGE_PLANE_INFO;
    plane->struct_size = sizeof(*plane);
    plane->width = w;
    plane->height = h;
    plane->row_stride = w;
    plane->num_channels = 1;
    plane->sample_type = NVIMGCODEC_SAMPLE_DATA_TYPE_UINT8;
    plane->precision = 8;
}

/* The output image info of JPEG i: planar sRGB (channels 3) or grey (1), each plane h x w; or,
 * where chroma is given, planar YCbCr as coded (Y h x w, Cb and Cr chroma[2i] x chroma[2i+1]). */
static void output_info(const Batcher* b, int i, int channels, uint32_t h, uint32_t w,
                        const int32_t* chroma, nvimgcodecImageInfo_t* info) {
    zero_info(info);
    if (chroma) {
        info->color_spec = NVIMGCODEC_COLORSPEC_SYCC;
        info->chroma_subsampling = (nvimgcodecChromaSubsampling_t)b->parsed[PARSED * i + 2];
        info->sample_format = NVIMGCODEC_SAMPLEFORMAT_P_YUV;
        info->num_planes = 3;
        set_plane(&info->plane_info[0], h, w);
        for (int p = 1; p < 3; p++)
            set_plane(&info->plane_info[p], (uint32_t)chroma[2 * i], (uint32_t)chroma[2 * i + 1]);
        return;
    }
    info->color_spec = channels == 1 ? NVIMGCODEC_COLORSPEC_GRAY : NVIMGCODEC_COLORSPEC_SRGB;
    info->chroma_subsampling = channels == 1 ? NVIMGCODEC_SAMPLING_GRAY : NVIMGCODEC_SAMPLING_NONE;
    info->sample_format =
        channels == 1 ? NVIMGCODEC_SAMPLEFORMAT_P_Y : NVIMGCODEC_SAMPLEFORMAT_P_RGB;
    info->num_planes = (uint32_t)channels;
    for (int p = 0; p < channels; p++) set_plane(&info->plane_info[p], h, w);
}

/* bd_decode's and bd_decode_yuv's work: chroma NULL for sRGB or grey, else YCbCr planes. */
static int decode(Batcher* b, int n, int channels, const int32_t* sizes, const int32_t* chroma,
                  const int32_t* regions, const uint64_t* outputs, void* cuda_stream,
                  int32_t* status) {
    if (n > b->capacity) return -1;
    for (int i = 0; i < n; i++) {
        if (!sizes[2 * i] || !sizes[2 * i + 1]) continue;  /* not decoded, nothing written */
        if (!fits(b, i, sizes[2 * i], sizes[2 * i + 1], regions)
            || (chroma && !chroma_fits(b, i, chroma)))
            return BD_SIZES_MISMATCH;
    }
    nvimgcodecCodeStream_t* streams = malloc(sizeof(nvimgcodecCodeStream_t) * (n ? n : 1));
    nvimgcodecImage_t* images = malloc(sizeof(nvimgcodecImage_t) * (n ? n : 1));
    int* which = malloc(sizeof(int) * (n ? n : 1));
    if (!streams || !images || !which) {
        free(streams);
        free(images);
        free(which);
        return -1;
    }
    int count = 0;
    for (int i = 0; i < n; i++) {
        status[i] = 0;
        uint32_t h = (uint32_t)sizes[2 * i], w = (uint32_t)sizes[2 * i + 1];
        if (!h || !w) continue;
        nvimgcodecImageInfo_t info;
        output_info(b, i, channels, h, w, chroma, &info);
        info.buffer = (void*)(uintptr_t)outputs[i];
        info.buffer_kind = b->on_device ? NVIMGCODEC_IMAGE_BUFFER_KIND_STRIDED_DEVICE
                                        : NVIMGCODEC_IMAGE_BUFFER_KIND_STRIDED_HOST;
        info.cuda_stream = (cudaStream_t)cuda_stream;
        nvimgcodecCodeStream_t stream = stream_of(b, i, regions);
        if (!stream || nvimgcodecImageCreate(b->instance, &b->images[i], &info)
                           != NVIMGCODEC_STATUS_SUCCESS)
            continue;
        streams[count] = stream;
        images[count] = b->images[i];
        which[count++] = i;
    }
    int result = 0;
    if (count) {
        nvimgcodecDecodeParams_t params = {NVIMGCODEC_STRUCTURE_TYPE_DECODE_PARAMS,
                                           sizeof(params), NULL};
        nvimgcodecFuture_t future;
        result = nvimgcodecDecoderDecode(b->decoder, streams, images, count, &params, &future);
        if (result == NVIMGCODEC_STATUS_SUCCESS) {
            nvimgcodecFutureWaitForAll(future);
            nvimgcodecProcessingStatus_t* done = malloc(sizeof(*done) * count);
            size_t got = 0;
            if (done && nvimgcodecFutureGetProcessingStatus(future, done, &got)
                            == NVIMGCODEC_STATUS_SUCCESS)
                for (size_t k = 0; k < got && k < (size_t)count; k++)
                    status[which[k]] = done[k] == NVIMGCODEC_PROCESSING_STATUS_SUCCESS;
            free(done);
            nvimgcodecFutureDestroy(future);
        }
    }
    free(streams);
    free(images);
    free(which);
    return result;
}

/* Decode the n parsed JPEGs (those with sizes) into planar sRGB (channels 3) or grey (1) at
 * outputs[i] (channels x h x w bytes, rows of w; h, w the region's where one is given, see
 * stream_of), ordered on cuda_stream: nvImageCodec waits for the work queued there before
 * writing and makes it wait for the decode after. status[i]: 1 decoded, 0 not (a layout this
 * backend refuses, corrupt data). One call into the decoder. BD_SIZES_MISMATCH, nothing
 * decoded, where a size does not fit its JPEG (fits). */
int bd_decode(Batcher* b, int n, int channels, const int32_t* sizes, const int32_t* regions,
              const uint64_t* outputs, void* cuda_stream, int32_t* status) {
    return decode(b, n, channels, sizes, NULL, regions, outputs, cuda_stream, status);
}

/* As bd_decode, whole images, but into the JPEGs' own planar YCbCr (no colour conversion, chroma
 * at its coded resolution): outputs[i] holds Y (h x w) then Cb and Cr (chroma[2i] x
 * chroma[2i+1] each, as chroma_size gives them). Only JPEGs coded in YCbCr with a subsampling the
 * engines take; BD_SIZES_MISMATCH where any other is given (a size of 0 x 0 skips one). An
 * experiment (scripts/bench/probe_yuv.py): the crops do not read this layout. */
int bd_decode_yuv(Batcher* b, int n, const int32_t* sizes, const int32_t* chroma,
                  const uint64_t* outputs, void* cuda_stream, int32_t* status) {
    return decode(b, n, 3, sizes, chroma, NULL, outputs, cuda_stream, status);
}

void bd_destroy(Batcher* b) {
    if (!b) return;
    for (int i = 0; i < b->capacity; i++) {
        if (b->images && b->images[i]) nvimgcodecImageDestroy(b->images[i]);
        if (b->regions && b->regions[i]) nvimgcodecCodeStreamDestroy(b->regions[i]);
        if (b->streams && b->streams[i]) nvimgcodecCodeStreamDestroy(b->streams[i]);
    }
    free(b->images);
    free(b->parsed);
    free(b->regions);
    free(b->streams);
    nvimgcodecDecoderDestroy(b->decoder);
    nvimgcodecInstanceDestroy(b->instance);
    free(b);
}
