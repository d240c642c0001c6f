//! Compute kernels: quantized dot products, matmul, float ops, threading; SIMD chosen at run time.
