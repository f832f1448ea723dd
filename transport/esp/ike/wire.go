package ike

import "strconv"

// Exchange types (RFC 7296 §3.1).
const (
	exchIKESAInit     = 34
	exchIKEAuth       = 35
	exchCreateChildSA = 36
	exchInformational = 37
)

// Header flags (RFC 7296 §3.1).
const (
	flagInitiator = 0x08
	flagResponse  = 0x20
)

// Payload types (RFC 7296 §3.2).
const (
	payloadNone     = 0
	payloadSA       = 33
	payloadKE       = 34
	payloadIDi      = 35
	payloadIDr      = 36
	payloadCert     = 37
	payloadCertReq  = 38
	payloadAuth     = 39
	payloadNonce    = 40
	payloadNotify   = 41
	payloadDelete   = 42
	payloadVendorID = 43
	payloadTSi      = 44
	payloadTSr      = 45
	payloadSK       = 46
	payloadCP       = 47
	payloadEAP      = 48
)

// Protocol identifiers of proposals, notifies and deletes (RFC 7296 §3.3.1).
const (
	protoIKE = 1
	protoESP = 3
)

// Transform types (RFC 7296 §3.3.2).
const (
	transEncr  = 1
	transPRF   = 2
	transInteg = 3
	transDH    = 4
	transESN   = 5
)

// Transform identifiers beyond those of dataplane.go.
const (
	prfHMACSHA256 = 5
	esnNo         = 0
	esnYes        = 1
)

// attrKeyLength is the Key Length transform attribute (RFC 7296 §3.3.5).
const attrKeyLength = 14

// Notify message types (RFC 7296 §3.10.1; RFC 5685 for none used here).
const (
	notifyUnsupportedCriticalPayload = 1
	notifyInvalidIKESPI              = 4
	notifyInvalidMajorVersion        = 5
	notifyInvalidSyntax              = 7
	notifyInvalidMessageID           = 9
	notifyInvalidSPI                 = 11
	notifyNoProposalChosen           = 14
	notifyInvalidKEPayload           = 17
	notifyAuthenticationFailed       = 24
	notifySinglePairRequired         = 34
	notifyNoAdditionalSAs            = 35
	notifyInternalAddressFailure     = 36
	notifyFailedCPRequired           = 37
	notifyTSUnacceptable             = 38
	notifyInvalidSelectors           = 39
	notifyTemporaryFailure           = 43
	notifyChildSANotFound            = 44

	// Status types are 16384 and above; an unknown one is ignored.
	notifyFirstStatus        = 16384
	notifyInitialContact     = 16384
	notifyNATDetectionSource = 16388
	notifyNATDetectionDest   = 16389
	notifyCookie             = 16390
	notifyRekeySA            = 16393
)

// notifyNames names the notify types that reach a log line or an error.
var notifyNames = map[uint16]string{
	notifyUnsupportedCriticalPayload: "UNSUPPORTED_CRITICAL_PAYLOAD",
	notifyInvalidIKESPI:              "INVALID_IKE_SPI",
	notifyInvalidMajorVersion:        "INVALID_MAJOR_VERSION",
	notifyInvalidSyntax:              "INVALID_SYNTAX",
	notifyInvalidMessageID:           "INVALID_MESSAGE_ID",
	notifyInvalidSPI:                 "INVALID_SPI",
	notifyNoProposalChosen:           "NO_PROPOSAL_CHOSEN",
	notifyInvalidKEPayload:           "INVALID_KE_PAYLOAD",
	notifyAuthenticationFailed:       "AUTHENTICATION_FAILED",
	notifySinglePairRequired:         "SINGLE_PAIR_REQUIRED",
	notifyNoAdditionalSAs:            "NO_ADDITIONAL_SAS",
	notifyInternalAddressFailure:     "INTERNAL_ADDRESS_FAILURE",
	notifyFailedCPRequired:           "FAILED_CP_REQUIRED",
	notifyTSUnacceptable:             "TS_UNACCEPTABLE",
	notifyInvalidSelectors:           "INVALID_SELECTORS",
	notifyTemporaryFailure:           "TEMPORARY_FAILURE",
	notifyChildSANotFound:            "CHILD_SA_NOT_FOUND",
}

func notifyName(t uint16) string {
	if n, ok := notifyNames[t]; ok {
		return n
	}
	return "notify " + strconv.Itoa(int(t))
}

// Authentication method of a PSK AUTH payload (RFC 7296 §3.8).
const authSharedKeyMIC = 2

// Identification types (RFC 7296 §3.5).
const (
	idIPv4Addr = 1
	idFQDN     = 2
	idRFC822   = 3
	idIPv6Addr = 5
	idKeyID    = 11
)

// Traffic selector types (RFC 7296 §3.13.1).
const (
	tsIPv4Range = 7
	tsIPv6Range = 8
)
