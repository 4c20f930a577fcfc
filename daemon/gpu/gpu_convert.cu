// SPDX-License-Identifier: MIT
//
// HWC uint8 -> CHW normalised float32/float16, on the GPU. The values come
// from the very table the CPU float path uses (augment.c:
// transform_lut_build(), copied to the device once per client), so a device
// batch is the CPU path's bit for bit: float32 equals ToTensor()+Normalize()
// as torch computes it, float16 is that rounded to nearest even.
//
// Built by nvcc into a fatbin (sm_80, sm_90 code and compute_90 PTX),
// embedded in stokerd and loaded with cuModuleLoadData (daemon/gpu/gpu.c).

template <typename T>
__device__ void convert(const unsigned char *__restrict__ in, T *__restrict__ out, const T *__restrict__ lut,
			unsigned long long plane, unsigned long long pixels)
{
	__shared__ T table[3 * 256];

	for (unsigned i = threadIdx.x; i < 3 * 256; i += blockDim.x)
		table[i] = lut[i];
	__syncthreads();
	// One pixel per thread and step: three byte reads, three writes that
	// are coalesced within each output plane.
	for (unsigned long long p = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; p < pixels;
	     p += (unsigned long long)gridDim.x * blockDim.x) {
		unsigned long long image = p / plane, at = p % plane;
		const unsigned char *px = in + p * 3;
		T *o = out + image * 3 * plane + at;

		o[0] = table[px[0]];
		o[plane] = table[256 + px[1]];
		o[2 * plane] = table[512 + px[2]];
	}
}

extern "C" __global__ void stoker_convert_f32(const unsigned char *in, float *out, const float *lut,
					      unsigned long long plane, unsigned long long pixels)
{
	convert<float>(in, out, lut, plane, pixels);
}

// float16 as its bits: the table holds binary16 values already rounded.
extern "C" __global__ void stoker_convert_f16(const unsigned char *in, unsigned short *out, const unsigned short *lut,
					      unsigned long long plane, unsigned long long pixels)
{
	convert<unsigned short>(in, out, lut, plane, pixels);
}
