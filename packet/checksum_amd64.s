#include "textflag.h"

// func sumAVX2(b []byte) uint64
TEXT ·sumAVX2(SB), NOSPLIT, $0-32
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3

loop:
	CMPQ CX, $64
	JB   done
	VPMOVZXDQ (SI), Y4
	VPMOVZXDQ 16(SI), Y5
	VPMOVZXDQ 32(SI), Y6
	VPMOVZXDQ 48(SI), Y7
	VPADDQ    Y4, Y0, Y0
	VPADDQ    Y5, Y1, Y1
	VPADDQ    Y6, Y2, Y2
	VPADDQ    Y7, Y3, Y3
	ADDQ      $64, SI
	SUBQ      $64, CX
	JMP       loop

done:
	VPADDQ       Y1, Y0, Y0
	VPADDQ       Y3, Y2, Y2
	VPADDQ       Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDQ       X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPADDQ       X1, X0, X0
	VMOVQ        X0, AX
	VZEROUPPER
	MOVQ         AX, ret+24(FP)
	RET
