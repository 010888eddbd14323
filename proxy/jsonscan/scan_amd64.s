#include "textflag.h"

// func marks(blk *[64]byte) (quotes, backslashes uint64)
TEXT ·marks(SB), NOSPLIT, $0-24
	MOVQ	blk+0(FP), SI
	MOVQ	$0x2222222222222222, AX
	MOVQ	AX, X8
	PSHUFD	$0, X8, X8
	MOVQ	$0x5c5c5c5c5c5c5c5c, AX
	MOVQ	AX, X9
	PSHUFD	$0, X9, X9
	MOVOU	(SI), X0
	MOVOU	16(SI), X1
	MOVOU	32(SI), X2
	MOVOU	48(SI), X3
	MOVO	X0, X4
	MOVO	X1, X5
	MOVO	X2, X6
	MOVO	X3, X7
	PCMPEQB	X8, X0
	PCMPEQB	X8, X1
	PCMPEQB	X8, X2
	PCMPEQB	X8, X3
	PCMPEQB	X9, X4
	PCMPEQB	X9, X5
	PCMPEQB	X9, X6
	PCMPEQB	X9, X7
	PMOVMSKB	X0, AX
	PMOVMSKB	X1, BX
	PMOVMSKB	X2, CX
	PMOVMSKB	X3, DX
	SHLQ	$16, BX
	SHLQ	$32, CX
	SHLQ	$48, DX
	ORQ	BX, AX
	ORQ	CX, AX
	ORQ	DX, AX
	MOVQ	AX, quotes+8(FP)
	PMOVMSKB	X4, AX
	PMOVMSKB	X5, BX
	PMOVMSKB	X6, CX
	PMOVMSKB	X7, DX
	SHLQ	$16, BX
	SHLQ	$32, CX
	SHLQ	$48, DX
	ORQ	BX, AX
	ORQ	CX, AX
	ORQ	DX, AX
	MOVQ	AX, backslashes+16(FP)
	RET

// Constants of denseAVX2, each 32 bytes (one Y register). The nibble
// tables are 16 bytes twice, as VPSHUFB looks up within each 16-byte half.
DATA	quotes<>+0(SB)/8, $0x2222222222222222
DATA	quotes<>+8(SB)/8, $0x2222222222222222
DATA	quotes<>+16(SB)/8, $0x2222222222222222
DATA	quotes<>+24(SB)/8, $0x2222222222222222
GLOBL	quotes<>(SB), RODATA|NOPTR, $32

DATA	backslashes<>+0(SB)/8, $0x5c5c5c5c5c5c5c5c
DATA	backslashes<>+8(SB)/8, $0x5c5c5c5c5c5c5c5c
DATA	backslashes<>+16(SB)/8, $0x5c5c5c5c5c5c5c5c
DATA	backslashes<>+24(SB)/8, $0x5c5c5c5c5c5c5c5c
GLOBL	backslashes<>(SB), RODATA|NOPTR, $32

DATA	nibble<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA	nibble<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA	nibble<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA	nibble<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL	nibble<>(SB), RODATA|NOPTR, $32

// The bytes that may follow a backslash as a two-byte escape,
// " / \ b f n r t, by high nibble: 2 ("/) is class 1, 5 (\) 2, 6 (bfn) 4,
// 7 (rt) 8, any other none. loClass is the classes each low nibble
// belongs to: 2 (" b r) 1|4|8, 4 (t) 8, 6 (f) 4, c (\) 2, e (n) 4, f (/)
// 1. A byte is one of them exactly when its two classes share a bit.
DATA	loClass<>+0(SB)/8, $0x00040008000d0000
DATA	loClass<>+8(SB)/8, $0x0104000200000000
DATA	loClass<>+16(SB)/8, $0x00040008000d0000
DATA	loClass<>+24(SB)/8, $0x0104000200000000
GLOBL	loClass<>(SB), RODATA|NOPTR, $32

DATA	hiClass<>+0(SB)/8, $0x0804020000010000
DATA	hiClass<>+8(SB)/8, $0x0000000000000000
DATA	hiClass<>+16(SB)/8, $0x0804020000010000
DATA	hiClass<>+24(SB)/8, $0x0000000000000000
GLOBL	hiClass<>(SB), RODATA|NOPTR, $32

// A \u escape's u, and hex digits by nibble: high 3 is class 1, 4 and 6
// class 2; low 0-9 are in class 1, 1-6 in class 2 as well.
DATA	letterU<>+0(SB)/8, $0x7575757575757575
DATA	letterU<>+8(SB)/8, $0x7575757575757575
DATA	letterU<>+16(SB)/8, $0x7575757575757575
DATA	letterU<>+24(SB)/8, $0x7575757575757575
GLOBL	letterU<>(SB), RODATA|NOPTR, $32

DATA	hexLo<>+0(SB)/8, $0x0103030303030301
DATA	hexLo<>+8(SB)/8, $0x0000000000000101
DATA	hexLo<>+16(SB)/8, $0x0103030303030301
DATA	hexLo<>+24(SB)/8, $0x0000000000000101
GLOBL	hexLo<>(SB), RODATA|NOPTR, $32

DATA	hexHi<>+0(SB)/8, $0x0002000201000000
DATA	hexHi<>+8(SB)/8, $0x0000000000000000
DATA	hexHi<>+16(SB)/8, $0x0002000201000000
DATA	hexHi<>+24(SB)/8, $0x0000000000000000
GLOBL	hexHi<>(SB), RODATA|NOPTR, $32

// func dense(b []byte, i int) (j int, found bool)
//
// The loop of str's dense reading kept in one call: per block of 64
// bytes, the marks of quotes and backslashes, the bytes the backslashes
// escape (escaped, in scalar code), and the escaped bytes that are not a
// two-byte escape, all without a branch per escape; those few are
// checked to be \u escapes in the same block. It stops at a block Go
// must read: one with no backslash, or with an invalid escape, or a \u
// whose digits cross into the next block, before its first unescaped
// quote.
//
// Unlike str's Go loop, which starts the next block at a backslash that
// ends one (64-pending), blocks here are 64 bytes apart and the pending
// escape is carried into the next block as its byte 0: where the next
// block's loads are then depends on nothing computed, so they run ahead
// instead of waiting out a block's marks and arithmetic. A stop hands Go
// the block it would have had, one byte back when an escape is pending.
//
// Registers: SI the body, CX i, DX the last i a block fits at,
// R10 the escape pending into this block (0 or 1), R13 the same kept
// for a stop, R12 0x55…, R11 0xaa…; Y8 quotes, Y9 backslashes, Y10 0x0f…,
// Y11 loClass, Y12 hiClass, Y13 zero.
TEXT ·dense(SB), NOSPLIT, $0-41
	MOVQ	b_base+0(FP), SI
	MOVQ	b_len+8(FP), DX
	MOVQ	i+24(FP), CX
	SUBQ	$64, DX
	XORL	R10, R10
	MOVQ	$0x5555555555555555, R12
	MOVQ	$0xaaaaaaaaaaaaaaaa, R11
	VMOVDQU	quotes<>(SB), Y8
	VMOVDQU	backslashes<>(SB), Y9
	VMOVDQU	nibble<>(SB), Y10
	VMOVDQU	loClass<>(SB), Y11
	VMOVDQU	hiClass<>(SB), Y12
	VPXOR	Y13, Y13, Y13

block:
	MOVQ	R10, R13
	CMPQ	CX, DX
	JGT	stop // fewer than 64 bytes left
	VMOVDQU	(SI)(CX*1), Y0
	VMOVDQU	32(SI)(CX*1), Y1

	// Bytes 0-31: quotes to AX, backslashes to BX, bytes that are
	// not a two-byte escape's second byte to DI.
	VPCMPEQB	Y0, Y8, Y2
	VPMOVMSKB	Y2, AX
	VPCMPEQB	Y0, Y9, Y3
	VPMOVMSKB	Y3, BX
	VPAND	Y0, Y10, Y4
	VPSHUFB	Y4, Y11, Y4 // low nibble's classes
	VPSRLW	$4, Y0, Y5
	VPAND	Y5, Y10, Y5
	VPSHUFB	Y5, Y12, Y5 // high nibble's class
	VPAND	Y4, Y5, Y4
	VPCMPEQB	Y4, Y13, Y4 // no class in common
	VPMOVMSKB	Y4, DI

	// Bytes 32-63, the same, joined above them.
	VPCMPEQB	Y1, Y8, Y2
	VPMOVMSKB	Y2, R8
	SHLQ	$32, R8
	ORQ	R8, AX // quotes
	VPCMPEQB	Y1, Y9, Y3
	VPMOVMSKB	Y3, R8
	SHLQ	$32, R8
	ORQ	R8, BX // backslashes
	VPAND	Y1, Y10, Y4
	VPSHUFB	Y4, Y11, Y4
	VPSRLW	$4, Y1, Y5
	VPAND	Y5, Y10, Y5
	VPSHUFB	Y5, Y12, Y5
	VPAND	Y4, Y5, Y4
	VPCMPEQB	Y4, Y13, Y4
	VPMOVMSKB	Y4, R8
	SHLQ	$32, R8
	ORQ	R8, DI // not a two-byte escape

	TESTQ	BX, BX
	JZ	stop // no backslash: Go turns to the chunked reading

	// escaped(bs) as in scan.go, with the pending escape carried in:
	// byte 0 is then escaped, and is no backslash of a run even if it
	// is one. x&^bs is written (x|bs)^bs. R9 gets the escaped bytes,
	// R10 the escape pending into the next block.
	ORQ	R10, BX
	XORQ	R10, BX // bs &^ pending
	MOVQ	BX, R8
	SHLQ	$1, R8
	NOTQ	R8
	ANDQ	BX, R8 // starts of runs
	MOVQ	R8, R9
	ANDQ	R12, R9
	ADDQ	BX, R9
	ORQ	BX, R9
	XORQ	BX, R9 // evenEnds
	ANDQ	R11, R9
	ORQ	R10, R9 // byte 0, escaped from before
	XORL	R10, R10
	ANDQ	R11, R8
	ADDQ	BX, R8
	ADCQ	$0, R10 // pending: the carry out of the block
	ORQ	BX, R8
	XORQ	BX, R8 // oddEnds
	ANDQ	R12, R8
	ORQ	R8, R9 // escaped bytes

	ANDQ	R9, DI  // escaped bytes no two-byte escape ends
	NOTQ	R9
	ANDQ	R9, AX  // unescaped quotes
	// Only escapes before the first unescaped quote count: the bits up
	// to it are AX^(AX-1), every bit when there is none.
	LEAQ	-1(AX), R8
	XORQ	AX, R8
	ANDQ	R8, DI
	JNZ	unicode

checked:
	TESTQ	AX, AX
	JNZ	quote
	ADDQ	$64, CX
	JMP	block

quote:
	BSFQ	AX, AX
	LEAQ	1(CX)(AX*1), AX
	MOVQ	AX, j+32(FP)
	MOVB	$1, found+40(FP)
	VZEROUPPER
	RET

unicode:
	// DI's escaped bytes may be a u and four hex digits (a \u escape),
	// else the text is invalid and Go says so. Hex digits are neither
	// quotes nor backslashes, so the marks above stand. A \u whose
	// digits reach past the block is left to Go.
	MOVQ	DI, R8
	SHRQ	$59, R8
	JNZ	stop
	VMOVDQU	letterU<>(SB), Y6
	VPCMPEQB	Y0, Y6, Y2
	VPMOVMSKB	Y2, R8
	VPCMPEQB	Y1, Y6, Y3
	VPMOVMSKB	Y3, BX
	SHLQ	$32, BX
	ORQ	BX, R8 // the block's u's
	MOVQ	DI, R9
	ORQ	R8, R9
	XORQ	R8, R9 // DI's bytes that are not u
	JNZ	stop
	VMOVDQU	hexLo<>(SB), Y6
	VMOVDQU	hexHi<>(SB), Y7
	VPAND	Y0, Y10, Y4
	VPSHUFB	Y4, Y6, Y4
	VPSRLW	$4, Y0, Y5
	VPAND	Y5, Y10, Y5
	VPSHUFB	Y5, Y7, Y5
	VPAND	Y4, Y5, Y4
	VPCMPEQB	Y4, Y13, Y4
	VPMOVMSKB	Y4, R8
	VPAND	Y1, Y10, Y4
	VPSHUFB	Y4, Y6, Y4
	VPSRLW	$4, Y1, Y5
	VPAND	Y5, Y10, Y5
	VPSHUFB	Y5, Y7, Y5
	VPAND	Y4, Y5, Y4
	VPCMPEQB	Y4, Y13, Y4
	VPMOVMSKB	Y4, BX
	SHLQ	$32, BX
	ORQ	BX, R8 // not hex digits
	// The four bytes after each u must all be hex digits.
	MOVQ	DI, BX
	SHLQ	$1, BX
	MOVQ	BX, R9
	SHLQ	$1, BX
	ORQ	BX, R9
	SHLQ	$1, BX
	ORQ	BX, R9
	SHLQ	$1, BX
	ORQ	BX, R9
	TESTQ	R9, R8
	JNZ	stop
	JMP	checked

stop:
	// Go reads from the block's start, or from the backslash before it
	// whose escape is pending.
	SUBQ	R13, CX
	MOVQ	CX, j+32(FP)
	MOVB	$0, found+40(FP)
	VZEROUPPER
	RET
