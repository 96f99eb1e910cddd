#!/bin/bash
# chrt.sh SENDPOLICY SERVEPOLICY [GOMAXPROCS of send]: serve+send, rates t=3..5 s, send invol cs/s
B=/tmp/lg
P=${3:-2}; sp_pol=${2:-other}; s_pol=${1:-other}
chrt --$sp_pol 0 $B serve --listen 127.0.0.1:7601 >/dev/null 2>/tmp/chrt-serve.err &
sp=$!
sleep 0.5
if [ -n "$3" ]; then export GOMAXPROCS=$3; fi
chrt --$s_pol 0 $B send --to 127.0.0.1:7601 --messages 400000000 > /tmp/chrt-send.txt 2>&1 &
cp=$!
unset GOMAXPROCS
sleep 2
snap(){ v=0;n=0; for s in /proc/$cp/task/*/status; do v=$((v+$(awk '/^voluntary_ctxt/{print $2}' $s))); n=$((n+$(awk '/^nonvoluntary_ctxt/{print $2}' $s))); done; echo "$v $n"; }
a=$(snap); s1=$(grep '^cpu ' /proc/stat)
sleep 4
b=$(snap); s2=$(grep '^cpu ' /proc/stat)
kill -9 $cp; kill $sp; wait 2>/dev/null
st=$(python3 -c "
a=list(map(int,'$s1'.split()[1:]));b=list(map(int,'$s2'.split()[1:]));d=[y-x for x,y in zip(a,b)];print('%.1f idle %.1f'%(100*d[7]/sum(d),100*d[3]/sum(d)))")
set -- x $a $b
echo "send=$s_pol serve=$sp_pol P=$P: $(grep -E 't=[2-5]s' /tmp/chrt-send.txt | awk '{printf "%s ", $3}') vol $(( ($4-$2)/4 )) invol $(( ($5-$3)/4 )) steal $st"
