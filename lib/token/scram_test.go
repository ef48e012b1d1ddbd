package token

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/xdg-go/scram"
)

// TestDeriveSCRAMRFC7677 checks the derivation against the SCRAM-SHA-256
// exchange of RFC 7677, section 3 (user "user", password "pencil"): the
// client proof it shows must verify against the derived StoredKey the way
// a server checks it, and the derived ServerKey must sign the server's
// final message the RFC shows.
func TestDeriveSCRAMRFC7677(t *testing.T) {
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	k, err := deriveSCRAM(SCRAMSHA256, "pencil", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Validate(); err != nil {
		t.Fatal(err)
	}
	const (
		clientFirstBare = "n=user,r=rOprNGfwEbeRWgbNEkqO"
		serverFirst     = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
		clientFinalNoPf = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
		proof           = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
		verifier        = "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
	)
	authMsg := clientFirstBare + "," + serverFirst + "," + clientFinalNoPf
	p, _ := base64.StdEncoding.DecodeString(proof)
	if !k.VerifyProof(authMsg, p) {
		t.Errorf("RFC 7677's client proof does not verify against the derived StoredKey %x", k.StoredKey)
	}
	if got := base64.StdEncoding.EncodeToString(k.ServerSignature(authMsg)); got != verifier {
		t.Errorf("server signature %s, want RFC 7677's %s", got, verifier)
	}
	// The proof of another message, a changed proof, or a proof of the
	// wrong length does not verify.
	if k.VerifyProof(authMsg+"x", p) {
		t.Error("the proof verifies for another AuthMessage")
	}
	bad := bytes.Clone(p)
	bad[0] ^= 1
	if k.VerifyProof(authMsg, bad) || k.VerifyProof(authMsg, p[:31]) || k.VerifyProof(authMsg, nil) {
		t.Error("a changed or truncated proof verifies")
	}
}

// TestDeriveSCRAMMatchesClient checks both mechanisms against the keys an
// independent SCRAM implementation (xdg-go/scram's client) derives from
// the same token, salt and count: what a client computes at login.
func TestDeriveSCRAMMatchesClient(t *testing.T) {
	tok, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for m, hg := range map[SCRAMMechanism]scram.HashGeneratorFcn{SCRAMSHA256: scram.SHA256, SCRAMSHA512: scram.SHA512} {
		k, err := DeriveSCRAM(tok, m)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Validate(); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		if k.Mechanism != m || k.Iterations != SCRAMIterations || len(k.Salt) != scramSaltBytes {
			t.Fatalf("%s: derived %v, %d iterations, %d-byte salt", m, k.Mechanism, k.Iterations, len(k.Salt))
		}
		cl, err := hg.NewClient("alice", tok.Reveal(), "")
		if err != nil {
			t.Fatal(err)
		}
		want, err := cl.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(k.Salt), Iters: k.Iterations})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(k.StoredKey, want.StoredKey) || !bytes.Equal(k.ServerKey, want.ServerKey) {
			t.Errorf("%s: derived keys differ from the client's", m)
		}
		if !VerifySCRAM(tok, k) {
			t.Errorf("%s: VerifySCRAM refuses the token the keys came from", m)
		}
		if other, _ := New(); VerifySCRAM(other, k) {
			t.Errorf("%s: VerifySCRAM accepts another token", m)
		}
		// A second derivation has its own salt, hence other keys.
		k2, err := DeriveSCRAM(tok, m)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(k.Salt, k2.Salt) || bytes.Equal(k.StoredKey, k2.StoredKey) {
			t.Errorf("%s: two derivations share a salt or keys", m)
		}
	}
	if _, err := DeriveSCRAM(Token{}, SCRAMSHA256); err == nil {
		t.Error("DeriveSCRAM of the zero Token succeeded")
	}
	if _, err := DeriveSCRAM(tok, 0); err == nil {
		t.Error("DeriveSCRAM of no mechanism succeeded")
	}
}

func TestSCRAMKeysValidate(t *testing.T) {
	tok, _ := New()
	good, err := DeriveSCRAM(tok, SCRAMSHA512)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(k *SCRAMKeys)
		want string
	}{
		{"no mechanism", func(k *SCRAMKeys) { k.Mechanism = 0 }, "unknown SCRAM mechanism"},
		{"no salt", func(k *SCRAMKeys) { k.Salt = nil }, "without a salt"},
		{"few iterations", func(k *SCRAMKeys) { k.Iterations = 1 }, "fewer than 4096"},
		{"SHA-256 keys for SHA-512", func(k *SCRAMKeys) { k.Mechanism = SCRAMSHA256 }, "not 32 bytes"},
		{"short server key", func(k *SCRAMKeys) { k.ServerKey = k.ServerKey[:10] }, "not 64 bytes"},
	} {
		k := good
		tc.edit(&k)
		if err := k.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestUsersSCRAM(t *testing.T) {
	alice, _ := New()
	old, _ := New()
	u, err := NewUsers(map[string]Hashed{"alice": Hash(alice), "old": Hash(old)})
	if err != nil {
		t.Fatal(err)
	}
	k256, _ := DeriveSCRAM(alice, SCRAMSHA256)
	k512, _ := DeriveSCRAM(alice, SCRAMSHA512)
	withKeys, err := u.WithSCRAM(map[string][]SCRAMKeys{"alice": {k256, k512}})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := withKeys.SCRAM("alice", SCRAMSHA512); !ok || !bytes.Equal(got.StoredKey, k512.StoredKey) {
		t.Errorf("SCRAM(alice, SHA-512) = %v, %v", got, ok)
	}
	if _, ok := withKeys.SCRAM("old", SCRAMSHA256); ok {
		t.Error("a user without SCRAM credentials has some")
	}
	if _, ok := u.SCRAM("alice", SCRAMSHA256); ok {
		t.Error("WithSCRAM changed the users it was called on")
	}
	if name, ok := withKeys.Authenticate(alice); !ok || name != "alice" {
		t.Errorf("the token no longer authenticates: %q, %v", name, ok)
	}
	var none *Users
	if _, ok := none.SCRAM("alice", SCRAMSHA256); ok {
		t.Error("nil Users has SCRAM credentials")
	}
	for name, keys := range map[string]map[string][]SCRAMKeys{
		"not a user":   {"bob": {k256}},
		"invalid":      {"alice": {{Mechanism: SCRAMSHA256}}},
		"same mech 2x": {"alice": {k256, k256}},
	} {
		if _, err := u.WithSCRAM(keys); err == nil {
			t.Errorf("%s: WithSCRAM accepted", name)
		}
	}
}

// BenchmarkDeriveSCRAM is what CreateUser spends per mechanism (PBKDF2
// with SCRAMIterations), and what a client spends at each SCRAM login.
func BenchmarkDeriveSCRAM(b *testing.B) {
	tok, err := New()
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range SCRAMMechanisms {
		b.Run(m.String(), func(b *testing.B) {
			for b.Loop() {
				if _, err := DeriveSCRAM(tok, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerifyProof is the server's work per SCRAM login: no PBKDF2,
// two HMACs and a hash.
func BenchmarkVerifyProof(b *testing.B) {
	tok, _ := New()
	k, err := DeriveSCRAM(tok, SCRAMSHA512)
	if err != nil {
		b.Fatal(err)
	}
	proof := make([]byte, 64)
	for b.Loop() {
		k.VerifyProof("n=alice,r=abc,r=abcdef,s=c2FsdA==,i=4096,c=biws,r=abcdef", proof)
		k.ServerSignature("n=alice,r=abc,r=abcdef,s=c2FsdA==,i=4096,c=biws,r=abcdef")
	}
}
