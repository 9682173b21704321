/* gsp_ws._mask: RFC 6455 masking into a buffer the caller owns (no allocation).
 *
 * mask_into(dst, src, key, phase): dst[i] = src[i] ^ key[(i + phase) % 4] for i < len(src);
 * dst is any writable buffer at least as long as src, and may be src itself (in place). The
 * websockets package's apply_mask does the same XOR but returns a new bytes object: a fresh
 * allocation per frame, which for 64 KiB frames means fresh pages from the kernel (glibc trims
 * the heap after each free of that size). Built with the gevent-sp-ws wheel when a C compiler
 * is there; gsp_ws._frames falls back to apply_mask and a copy when it is not. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *
mask_into(PyObject *self, PyObject *args)
{
    Py_buffer dst, src, key;
    Py_ssize_t phase;
    if (!PyArg_ParseTuple(args, "w*y*y*n:mask_into", &dst, &src, &key, &phase))
        return NULL;
    PyObject *result = NULL;
    if (key.len != 4) {
        PyErr_SetString(PyExc_ValueError, "the mask key is 4 bytes");
        goto done;
    }
    if (dst.len < src.len) {
        PyErr_SetString(PyExc_ValueError, "the destination is shorter than the source");
        goto done;
    }
    {
        const uint8_t *k = (const uint8_t *)key.buf;
        uint8_t rot[8];
        for (int i = 0; i < 8; i++)
            rot[i] = k[(i + (phase & 3)) & 3];
        uint64_t k8;
        memcpy(&k8, rot, 8);
        const uint8_t *s = (const uint8_t *)src.buf;
        uint8_t *d = (uint8_t *)dst.buf;
        Py_ssize_t n = src.len, i = 0;
        for (; i + 32 <= n; i += 32) {
            uint64_t w0, w1, w2, w3;
            memcpy(&w0, s + i, 8);
            memcpy(&w1, s + i + 8, 8);
            memcpy(&w2, s + i + 16, 8);
            memcpy(&w3, s + i + 24, 8);
            w0 ^= k8; w1 ^= k8; w2 ^= k8; w3 ^= k8;
            memcpy(d + i, &w0, 8);
            memcpy(d + i + 8, &w1, 8);
            memcpy(d + i + 16, &w2, 8);
            memcpy(d + i + 24, &w3, 8);
        }
        for (; i < n; i++)
            d[i] = s[i] ^ rot[i & 3];  /* i is a multiple of 8 where the tail starts */
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    PyBuffer_Release(&key);
    return result;
}

static PyMethodDef methods[] = {
    {"mask_into", mask_into, METH_VARARGS,
     "mask_into(dst, src, key, phase): dst[i] = src[i] ^ key[(i + phase) % 4], in place."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gsp_ws._mask", "RFC 6455 masking into a given buffer.", -1, methods,
};

PyMODINIT_FUNC
PyInit__mask(void)
{
    return PyModule_Create(&module);
}
