/* The warm-read syscalls side by side: read(), pread() and
 * preadv2(RWF_NOWAIT) of 128 KiB over a file in the page cache, into one
 * 4096-aligned buffer, 7 alternating rounds (the first round also warms
 * the file). Used to check that pagestream's inline preadv2 costs what the
 * read loop's read() costs (README, "Sequential scan").
 *
 *   gcc -O2 -o target/read_syscalls benches/scripts/read_syscalls.c
 *   target/read_syscalls target/pagestream-data/seqscan-1GiB.dat
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/uio.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  int fd=open(argv[1],O_RDONLY); long size=lseek(fd,0,SEEK_END);
  size_t rd=128*1024; char* buf=aligned_alloc(4096, rd);
  for(int rep=0;rep<7;rep++) for(int mode=0;mode<3;mode++){
    double t0=now(); unsigned long ck=0; lseek(fd,0,SEEK_SET);
    for(long off=0; off<size; off+=rd){
      ssize_t n;
      if(mode==0) n=read(fd,buf,rd);
      else if(mode==1) n=pread(fd,buf,rd,off);
      else { struct iovec v={buf,rd}; n=preadv2(fd,&v,1,off,RWF_NOWAIT); }
      if(n!=(ssize_t)rd){perror("r");return 1;}
      ck+=buf[0]+buf[rd-1];
    }
    printf("%s %.1f ms\n", mode==0?"read   ":mode==1?"pread  ":"preadv2nw", (now()-t0)*1e3);
  }
}
