ş\To[W0_n`/_iy2^e2Uld8_lz2_ld2_ld25|'v3!vOtl5:zO=7a
/'"5:gOltE*t-20gr<v0t0_l^0_n`/_iy2^e2Uld8_mz2_ld2_ld25|'v3!vOtl5:zO=7a
/'"5:gOmtE*t-20gr<v0t0_l^0_n`/_iy2^e2Uld8_nz2_ld2_ld25|'v3!vOtl5:zO=7a
/'"5:gOntE*t-20gr<v0t0_l^0_n`/_iy2^e2Uld