"""The integer arithmetic of one deformed image, shared by the CPU and CUDA kernels.

Every value is an int64 computed from (seed, image index, copy index) and the
source pixels with integer operations only (a 31-bit hash, Q14 matrices, Q8
coordinates, bilinear weights in 1/65536), so the CPU twin
(``rows.deform_cpu``) and the CUDA kernel (``cuda.deform_rows``) give bit-identical
rows, and any row can be regenerated anywhere.  No products exceed 2**62.

A deformation, for copy ``c > 0`` of an image (copy 0 is the image itself):
rotation by ``2 atan(t)`` (``t`` uniform, so at most ``rotate`` degrees),
isotropic scale ``1 +- scale``, shear ``+- shear``, shift ``+- shift`` pixels,
then an elastic field: ``G x G`` control displacements of at most ``elastic``
pixels, bilinearly interpolated over the image.  Output pixel ``(y, x)``
samples the source bilinearly at the mapped point (zero outside).
"""

from __future__ import annotations

from ..jitable import both_targets
from .params import Q14

M31 = 0x7FFFFFFF
GRID = 4                      # elastic control points per side
N_DRAWS = 5 + 2 * GRID * GRID  # tx, ty, rotation, scale, shear, then the elastic grid


@both_targets
def mix31(x):
    """A 31-bit integer hash (two multiply-xorshift rounds)."""
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & M31
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & M31
    return x ^ (x >> 16)


@both_targets
def draw(seed, image, copy, j):
    """The ``j``-th random integer in ``[0, 2**31)`` of (``seed``, ``image``, ``copy``)."""
    h = mix31((seed & M31) ^ 0x2545F49)
    h = mix31((h + image) & M31)
    h = mix31((h + copy * 40503) & M31)
    return mix31((h + j * 2654435) & M31)


@both_targets
def uniform(value, bound):
    """``value`` (a draw) mapped to an integer in ``[-bound, bound]``."""
    return value % (2 * bound + 1) - bound


@both_targets
def fill_draws(out, seed, image, copy, shift_q8, tan_q14, scale_q14, shear_q14, elastic_q8, j0,
               step):
    """Draws ``j0, j0 + step, ...`` of one deformation into ``out`` (zero for copy 0).

    ``out[0:2]`` shift (Q8), ``out[2]`` tangent of half the angle (Q14),
    ``out[3]`` scale (Q14, around 1), ``out[4]`` shear (Q14), then the
    elastic grid's x and y displacements (Q8).
    """
    for j in range(j0, N_DRAWS, step):
        if copy == 0:
            out[j] = Q14 if j == 3 else 0
            continue
        d = draw(seed, image, copy, j)
        if j < 2:
            out[j] = uniform(d, shift_q8)
        elif j == 2:
            out[j] = uniform(d, tan_q14)
        elif j == 3:
            out[j] = Q14 + uniform(d, scale_q14)
        elif j == 4:
            out[j] = uniform(d, shear_q14)
        else:
            out[j] = uniform(d, elastic_q8)


@both_targets
def _grid_pos(p, side):
    """Control cell and weight (Q8) of pixel coordinate ``p`` along one axis."""
    t = (p * (GRID - 1) * 256) // (side - 1)
    cell = t >> 8
    if cell >= GRID - 1:
        return GRID - 2, 256
    return cell, t & 255


@both_targets
def _elastic(draws, base, gx, fx, gy, fy):
    a = draws[base + gy * GRID + gx]
    b = draws[base + gy * GRID + gx + 1]
    c = draws[base + (gy + 1) * GRID + gx]
    d = draws[base + (gy + 1) * GRID + gx + 1]
    return (a * (256 - fx) * (256 - fy) + b * fx * (256 - fy) + c * (256 - fx) * fy
            + d * fx * fy) >> 16


@both_targets
def _source_pixel(src, image, side, y, x):
    if x < 0 or y < 0 or x >= side or y >= side:
        return 0
    return int(src[image, y * side + x])


@both_targets
def pixel(src, image, side, draws, py, px):
    """Output pixel ``(py, px)`` of the deformed image (0..255)."""
    t = draws[2]
    d2 = Q14 * Q14 + t * t
    cos = ((Q14 * Q14 - t * t) * Q14) // d2
    sin = (2 * t * Q14 * Q14) // d2
    s, h = draws[3], draws[4]
    # M = R(angle) . [[s, h], [0, s]]  (Q14)
    m00 = (cos * s) >> 14
    m01 = (cos * h - sin * s) >> 14
    m10 = (sin * s) >> 14
    m11 = (sin * h + cos * s) >> 14
    c0 = (side - 1) * 128                     # the image centre, Q8
    u = px * 256 - c0
    v = py * 256 - c0
    gx, fx = _grid_pos(px, side)
    gy, fy = _grid_pos(py, side)
    sx = ((m00 * u + m01 * v) >> 14) + c0 + draws[0] + _elastic(draws, 5, gx, fx, gy, fy)
    sy = ((m10 * u + m11 * v) >> 14) + c0 + draws[1] + _elastic(draws, 5 + GRID * GRID, gx, fx,
                                                                gy, fy)
    x0, y0 = sx >> 8, sy >> 8
    wx, wy = sx & 255, sy & 255
    acc = (_source_pixel(src, image, side, y0, x0) * (256 - wx) * (256 - wy)
           + _source_pixel(src, image, side, y0, x0 + 1) * wx * (256 - wy)
           + _source_pixel(src, image, side, y0 + 1, x0) * (256 - wx) * wy
           + _source_pixel(src, image, side, y0 + 1, x0 + 1) * wx * wy)
    return (acc + 32768) >> 16
